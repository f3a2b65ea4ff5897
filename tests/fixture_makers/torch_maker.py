"""Plain torch / safetensors fixtures: `python tests/fixture_makers/torch_maker.py OUT_DIR`.

Cases (family, kind):
- model_pt           model.pt: a model state_dict via torch.save ("torch-zip", "model")
- model_fake_st      the same bytes as model_renamed.safetensors (detection must be by content;
                     note torch 2.13's torch.load(<path ending in .safetensors>) hands the path to
                     safetensors by its name and fails: open it and pass the file object)
- model_noext        the same bytes with no extension
- shared_storage     tied weights (two keys, one tensor) plus views of one base tensor
                     (transposed, narrow(), a strided column slice) saved with shared storage
- parameters         nn.Parameter values (pickled through torch._utils._rebuild_parameter)
- dtypes             bf16, fp16, int64, bool, int8, float64 and 0-dim tensors
- legacy             torch.save(..., _use_new_zipfile_serialization=False) ("torch-legacy", "model")
- optimizer          torch AdamW state_dict after 2 steps, 2 param groups ("torch-zip", "optimizer");
                     AdamW's `step` is a 0-dim float32 tensor, so it is a tensor entry; the groups
                     carry `initial_lr` because a StepLR wraps the optimizer
- scheduler          StepLR state_dict after 2 steps ("torch-zip", "scheduler"): all top-level keys
- rng                meta.pt {"torch_rng": get_rng_state(), "epoch": 2, "step": 10} ("torch-zip", "rng")
- safetensors        safetensors.torch.save_file with metadata {"format": "pt"}, incl. a bf16 and an
                     empty tensor ("safetensors", "model"); extra key "metadata" = the header's
                     __metadata__
Runs in under 10 s; outputs are a few KB each (about 70 KB together).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import safetensors
import safetensors.torch
import torch
from _manifest import jsonable, main_out_dir, optimizer_entries, run_maker, tensors_entries
from torch import nn


def _tiny_model() -> nn.Sequential:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    m.train()
    m(torch.randn(5, 4))  # moves BatchNorm running stats and num_batches_tracked (int64)
    return m


def _check_roundtrip(path: Path, expected: Mapping[str, torch.Tensor], **load_kw: Any) -> None:
    loaded = torch.load(path, map_location="cpu", weights_only=True, **load_kw)
    if list(loaded) != list(expected):
        raise AssertionError(f"{path}: keys {list(loaded)} != {list(expected)}")
    for k, v in expected.items():
        if not (loaded[k].dtype == v.dtype and torch.equal(loaded[k], v)):
            raise AssertionError(f"{path}: {k} differs after load")


def case_model(out: Path) -> dict[str, Any]:
    sd = _tiny_model().state_dict()
    path = out / "model.pt"
    torch.save(sd, path)
    _check_roundtrip(path, sd)
    shutil.copyfile(path, out / "model_renamed.safetensors")
    shutil.copyfile(path, out / "model_noext")
    # torch >= 2.13 routes torch.load(<path ending in .safetensors>) to safetensors by the name;
    # through a file object the renamed copy loads as the torch zip it is.
    with open(out / "model_renamed.safetensors", "rb") as fh:
        renamed = torch.load(fh, map_location="cpu", weights_only=True)
    if list(renamed) != list(sd) or not all(torch.equal(renamed[k], v) for k, v in sd.items()):
        raise AssertionError("renamed copy does not load back as the same state_dict")
    entries = tensors_entries(sd)
    return {
        cid: {"path": name, "family": "torch-zip", "kind": "model", "tensors": entries}
        for cid, name in (
            ("model_pt", "model.pt"),
            ("model_fake_st", "model_renamed.safetensors"),
            ("model_noext", "model_noext"),
        )
    }


def case_shared_storage(out: Path) -> dict[str, Any]:
    torch.manual_seed(1)
    emb = torch.randn(10, 4)
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6) / 7.0
    sd = {
        "embed.weight": emb,
        "lm_head.weight": emb,  # tied: the very same tensor object under two keys
        "base": base,
        "base_t": base.t(),  # non-contiguous transposed view of `base`
        "base_rows": base.narrow(0, 1, 2),  # storage offset 6
        "base_col": base[:, 3],  # stride (6,), offset 3
    }
    assert sd["base_t"].untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    path = out / "shared_storage.pt"
    torch.save(sd, path)
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    # torch.save keeps one storage per original storage: views stay views after loading.
    if loaded["embed.weight"].untyped_storage().data_ptr() != (
        loaded["lm_head.weight"].untyped_storage().data_ptr()
    ):
        raise AssertionError("tied tensors no longer share storage after load")
    if loaded["base_t"].is_contiguous() or loaded["base_t"].stride() != (1, 6):
        raise AssertionError("transposed view lost its strides")
    _check_roundtrip(path, sd)
    return {
        "shared_storage": {
            "path": "shared_storage.pt",
            "family": "torch-zip",
            "kind": "model",
            "tensors": tensors_entries(sd),
        }
    }


def case_parameters(out: Path) -> dict[str, Any]:
    torch.manual_seed(2)
    sd = {
        "w": nn.Parameter(torch.randn(3, 5)),
        "b": nn.Parameter(torch.randn(5)),
        "frozen": nn.Parameter(torch.ones(2, 2), requires_grad=False),
    }
    path = out / "parameters.pt"
    torch.save(sd, path)
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    if not all(isinstance(v, nn.Parameter) for v in loaded.values()):
        raise AssertionError("Parameters did not round-trip as nn.Parameter")
    _check_roundtrip(path, sd)
    return {
        "parameters": {
            "path": "parameters.pt",
            "family": "torch-zip",
            "kind": "model",
            "tensors": tensors_entries(sd),
        }
    }


def case_dtypes(out: Path) -> dict[str, Any]:
    torch.manual_seed(3)
    sd = {
        "bf16": torch.randn(4, 3).to(torch.bfloat16),
        "fp16": torch.randn(2, 3).to(torch.float16),
        "fp64": torch.randn(3).double(),
        "i64": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "i8": torch.tensor([-3, 0, 7], dtype=torch.int8),
        "mask": torch.tensor([[True, False], [False, True]]),
        "scalar": torch.tensor(3.5),
        "scalar_i64": torch.tensor(42),
    }
    path = out / "dtypes.pt"
    torch.save(sd, path)
    _check_roundtrip(path, sd)
    return {
        "dtypes": {
            "path": "dtypes.pt",
            "family": "torch-zip",
            "kind": "model",
            "tensors": tensors_entries(sd),
        }
    }


def case_legacy(out: Path) -> dict[str, Any]:
    sd = _tiny_model().state_dict()
    path = out / "model_legacy.pt"
    torch.save(sd, path, _use_new_zipfile_serialization=False)
    if path.read_bytes()[:4] == b"PK\x03\x04":
        raise AssertionError("legacy save produced a zip file")
    _check_roundtrip(path, sd)
    return {
        "legacy": {
            "path": "model_legacy.pt",
            "family": "torch-legacy",
            "kind": "model",
            "tensors": tensors_entries(sd),
        }
    }


def case_optimizer_scheduler(out: Path) -> dict[str, Any]:
    m = _tiny_model()
    groups: list[dict[str, Any]] = [
        {"params": list(m[0].parameters())},
        {
            "params": list(m[1].parameters()) + list(m[3].parameters()),
            "lr": 1e-2,
            "weight_decay": 0.0,
        },
    ]
    opt = torch.optim.AdamW(
        groups,
        lr=1e-3,
    )
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    torch.manual_seed(4)
    for _ in range(2):
        m(torch.randn(6, 4)).square().mean().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    osd = opt.state_dict()
    ssd = sched.state_dict()
    torch.save(osd, out / "optimizer.pt")
    torch.save(ssd, out / "scheduler.pt")
    reloaded = torch.load(out / "optimizer.pt", map_location="cpu", weights_only=True)
    if reloaded["param_groups"] != osd["param_groups"]:
        raise AssertionError("optimizer param_groups differ after load")
    opt_case = {"path": "optimizer.pt", "family": "torch-zip", "kind": "optimizer"}
    opt_case.update(optimizer_entries(osd))
    return {
        "optimizer": opt_case,
        "scheduler": {
            "path": "scheduler.pt",
            "family": "torch-zip",
            "kind": "scheduler",
            "values": {k: jsonable(v) for k, v in ssd.items()},
        },
    }


def case_rng(out: Path) -> dict[str, Any]:
    meta: dict[str, Any] = {"torch_rng": torch.get_rng_state(), "epoch": 2, "step": 10}
    torch.save(meta, out / "meta.pt")
    return {
        "rng": {
            "path": "meta.pt",
            "family": "torch-zip",
            "kind": "rng",
            "tensors": tensors_entries({"torch_rng": meta["torch_rng"]}),
            "values": {"epoch": 2, "step": 10},
        }
    }


def case_safetensors(out: Path) -> dict[str, Any]:
    torch.manual_seed(5)
    sd = {
        "dense.weight": torch.randn(6, 4),
        "dense.bias": torch.randn(6),
        "emb.bf16": torch.randn(5, 4).to(torch.bfloat16),
        "empty": torch.zeros(0, 4),
        "ids": torch.arange(5, dtype=torch.int64),
        "scale": torch.tensor(0.25),
    }
    path = out / "model.safetensors"
    safetensors.torch.save_file(sd, str(path), metadata={"format": "pt"})
    with safetensors.safe_open(str(path), framework="pt") as f:
        if f.metadata() != {"format": "pt"}:
            raise AssertionError(f"metadata {f.metadata()}")
        on_disk = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    if sorted(on_disk) != sorted(sd):
        raise AssertionError(f"safetensors keys {sorted(on_disk)}")
    for k, v in sd.items():
        if not (on_disk[k].dtype == v.dtype and torch.equal(on_disk[k], v)):
            raise AssertionError(f"safetensors {k} differs")
    return {
        "safetensors": {
            "path": "model.safetensors",
            "family": "safetensors",
            "kind": "model",
            "tensors": tensors_entries(sd),
            "metadata": {"format": "pt"},  # the header's __metadata__ (extra manifest key)
        }
    }


CASES = {
    "model": case_model,
    "shared_storage": case_shared_storage,
    "parameters": case_parameters,
    "dtypes": case_dtypes,
    "legacy": case_legacy,
    "optimizer_scheduler": case_optimizer_scheduler,
    "rng": case_rng,
    "safetensors": case_safetensors,
}


if __name__ == "__main__":
    out_dir = main_out_dir(sys.argv)
    sys.exit(run_maker(out_dir, "torch", torch.__version__, CASES))
