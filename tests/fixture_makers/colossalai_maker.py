"""Write tiny real ColossalAI 0.5.0 checkpoints plus ``manifest.json`` (see README.md here).

Usage: ``python tests/fixture_makers/colossalai_maker.py OUT_DIR``

Everything is written by ColossalAI's own code on CPU:

* ``general/``  GeneralCheckpointIO in this process (no process group): unsharded model (.bin,
  .safetensors), sharded model (.bin / .safetensors shards, with and without a ``prefix``), unsharded
  and sharded optimizer (with and without a prefix), LR scheduler via ``save_lr_scheduler``.
* ``async/``  ColossalAI's async safetensors writer (``colossalai/utils/safetensors.py``).
  SUBSTITUTED: tensornvme and CUDA are absent here, so two stand-ins are installed for the duration
  of these saves only: (1) ``colossalai.utils.safetensors.AsyncFileWriter`` becomes
  ``_SyncFileWriter`` (same methods, writes synchronously with seek+write at the offsets ColossalAI
  passes); (2) ``colossalai.checkpoint_io.utils._pin_tensor`` returns an ordinary (unpinned) CPU
  tensor, because ``pin_memory=True`` needs an accelerator. Headers, tensor order, flattening and the
  index / group files are all produced by ColossalAI's own code (``prepare``/``save``/
  ``save_nested``/``move_and_save``/``_flatten_optim_state_dict`` and GeneralCheckpointIO's
  ``use_async=True`` paths), and every file is read back with ColossalAI's own ``load_flat`` /
  safetensors ``load_file``.
* ``ddp/``  Booster + TorchDDPPlugin (gloo world of 1, subprocess, transformers 5.x): a
  ColossalChat-style training-state folder ``epoch-1_step-3/{modeling,optimizer,lr_scheduler,
  running_states.json}`` and a ``global_step3/{model,optim,lr_scheduler,meta.pt}`` folder.
* ``hybrid/``  HybridParallelPlugin(tp=1, pp=1) (gloo world of 1, subprocess with transformers
  4.51.3 first on PYTHONPATH); the model has tied embeddings, so ``lm_head.weight`` is absent from
  the sharded save (FORMATS.md section 13).
* ``pipeline/``  HybridParallelPlugin(tp=1, pp=2) under ``torch.distributed.run --nproc-per-node 2``
  (gloo, transformers 4.51.3). ``torch.distributed.is_hccl_available`` is set to return False first
  (torch 2.13 lacks it). ``pipeline/modeling_interrupted`` is an "interrupted pipeline save": while
  the real save runs, ColossalAI's ``rmtree`` of ``tmp_index_files/`` (hybrid_parallel_checkpoint_io)
  is wrapped so that the real per-stage temp indexes are copied aside just before they are deleted;
  the folder is then assembled from those copies (as ``tmp_index_files/``) plus the real stage shard
  files they name. The final index, config.json and generation_config.json are left out, as they are
  only written after the merge step that an interruption would prevent.

config.json: general/ and ddp/ run with transformers 5.x, where ColossalAI's ``save_config_file``
silently writes nothing (its ``from transformers.modeling_utils import get_parameter_dtype`` fails),
so those sharded dirs have no config.json; hybrid/ and pipeline/ (transformers 4.51.3) have
config.json and generation_config.json.

Left out (not possible on this CPU-only machine): LowLevelZero and Gemini (need CUDA); the async
Hybrid paths (``_model_sharder`` calls ``torch.empty_like(pin_memory=True)`` directly);
loading sharded optimizers back through GeneralCheckpointIO (``get_accelerator().synchronize()``
raises on CPU), so optimizer checkpoints are verified by reading the files with torch.load /
load_flat instead. The interrupted *optimizer* pipeline save is not produced (its group file is
written only after the merge, so such a folder carries no param_groups).

Manifest content comes from the tool's own objects (``model.state_dict()``,
``optimizer.state_dict()``, the Hybrid optimizer's ``param_info`` mapping, the scheduler's
``state_dict()``), restricted to the names actually on disk, and every case is cross-checked
against the files (torch.load(weights_only=True) / safetensors / load_flat). Any failure is fatal.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _manifest import (
    LOCALHOST,
    free_port,
    launcher_env,
    leave_worker,
    path_first,
    run_session,
    side_folder,
    torchrun_cmd,
)

SEED = 0
SHARD_MB = 0.05  # MiB per shard: the tiny models below give 3-6 shards
STEPS = 3
EPOCH = 1
BATCH = 8  # sample_start_index = STEPS * BATCH = 24
PREFIX = "ema"
LLAMA_KW = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)
SUBPROCESS_TIMEOUT_S = 300
OUTPUTS = ("general", "async", "ddp", "hybrid", "pipeline", "manifest.json")


# ----------------------------------------------------------------------------------------------
# Generic helpers (tensors -> manifest entries, reading files back)
# ----------------------------------------------------------------------------------------------


def _tensor_entry(t: torch.Tensor) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
    }
    if t.is_floating_point():
        entry["sum"] = float(t.detach().double().sum())
    return entry


def _jsonable(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        raise TypeError(f"tensor where a JSON value was expected: {v!r}")
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise TypeError(f"not JSON-able: {type(v)} {v!r}")


def _assert_same_tensor(name: str, a: torch.Tensor, b: torch.Tensor) -> None:
    a = a.detach().cpu()
    b = b.detach().cpu()
    assert a.dtype == b.dtype, f"{name}: dtype {a.dtype} != {b.dtype}"
    assert a.shape == b.shape, f"{name}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    assert torch.equal(a, b), f"{name}: values differ"


def _tied_duplicates(state_dict: dict[str, torch.Tensor]) -> set[str]:
    """Names whose tensor shares storage with an earlier name (e.g. a tied lm_head)."""
    seen: dict[tuple[int, int, tuple[int, ...]], str] = {}
    dups: set[str] = set()
    for name, t in state_dict.items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if key in seen:
            dups.add(name)
        else:
            seen[key] = name
    return dups


def model_tensors(
    expected: dict[str, torch.Tensor],
    on_disk: dict[str, torch.Tensor],
    allow_missing_tied: bool = False,
) -> dict[str, Any]:
    """Manifest tensors: the tool's tensors for exactly the names that are on disk."""
    extra = set(on_disk) - set(expected)
    assert not extra, f"names on disk that the model does not have: {sorted(extra)}"
    missing = set(expected) - set(on_disk)
    if missing:
        assert allow_missing_tied, f"names missing on disk: {sorted(missing)}"
        tied = _tied_duplicates(expected)
        assert missing == tied, (
            f"missing on disk {sorted(missing)} != tied duplicates {sorted(tied)}"
        )
    out = {}
    for name, t in expected.items():
        if name in on_disk:
            _assert_same_tensor(name, t, on_disk[name])
            out[name] = _tensor_entry(t)
    return out


def optimizer_fields(
    state: dict[int, dict[str, Any]],
    param_groups: list[dict[str, Any]] | None,
    disk_state: dict[int, dict[str, Any]],
    disk_groups: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """Manifest tensors/values/param_groups of an optimizer, cross-checked against disk."""
    assert set(state) == set(disk_state), f"ids {sorted(state)} != on disk {sorted(disk_state)}"
    tensors: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for pid in sorted(state):
        s, d = state[pid], disk_state[pid]
        live = {k: v for k, v in s.items() if v is not None}
        assert set(live) == set(d), f"state {pid}: {sorted(live)} != on disk {sorted(d)}"
        for k, v in live.items():
            key = f"state.{pid}.{k}"
            if isinstance(v, torch.Tensor):
                _assert_same_tensor(key, v, d[k])
                tensors[key] = _tensor_entry(v)
            else:
                assert not isinstance(d[k], torch.Tensor) and d[k] == v, f"{key}: {v!r} != {d[k]!r}"
                values[key] = _jsonable(v)
    fields: dict[str, Any] = {"tensors": tensors}
    if values:
        fields["values"] = values
    if param_groups is not None:
        groups = _jsonable(param_groups)
        assert disk_groups is not None
        assert groups == _jsonable(disk_groups), f"param_groups differ: {groups} != {disk_groups}"
        fields["param_groups"] = groups
    return fields


def scheduler_values(sd: dict[str, Any], disk: dict[str, Any]) -> dict[str, Any]:
    assert _jsonable(sd) == _jsonable(disk), "scheduler state differs from the file"
    return {k: _jsonable(sd[k]) for k in ("last_epoch", "_step_count", "base_lrs", "_last_lr")}


def case(path: str, family: str, kind: str, **fields: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"path": path, "family": family, "kind": kind}
    c.update({k: v for k, v in fields.items() if v is not None})
    return c


def _load_torch(path: str | os.PathLike) -> Any:
    return torch.load(path, map_location="cpu", weights_only=True)


def read_single_file(path: str | os.PathLike) -> Any:
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic == b"PK\x03\x04":
        return _load_torch(path)
    from safetensors.torch import load_file

    return load_file(str(path))


def _index_of(dirpath: Path) -> tuple[Path, dict[str, Any]]:
    found = sorted(glob.glob(str(dirpath / "*.index.*json")))
    assert len(found) == 1, f"{dirpath}: expected one index file, found {found}"
    with open(found[0], encoding="utf-8") as fh:
        return Path(found[0]), json.load(fh)


def _tmp_indexes_of(dirpath: Path) -> dict[str, str]:
    """Merge tmp_index_files/*.json the way ColossalAI's final merge does."""
    weight_map: dict[str, str] = {}
    files = sorted((dirpath / "tmp_index_files").glob("*.json"))
    assert len(files) >= 2, f"{dirpath}: expected >= 2 stage indexes, found {files}"
    for f in files:
        with open(f, encoding="utf-8") as fh:
            weight_map.update(json.load(fh)["weight_map"])
    assert not list(dirpath.glob("*.index.*json")), f"{dirpath}: a final index exists"
    return weight_map


def read_sharded_model(
    dirpath: str | os.PathLike, interrupted: bool = False
) -> dict[str, torch.Tensor]:
    dirpath = Path(dirpath)
    if interrupted:
        weight_map = _tmp_indexes_of(dirpath)
    else:
        _, index = _index_of(dirpath)
        assert set(index) == {"metadata", "weight_map"}, index.keys()
        assert "param_groups" not in index["metadata"]
        weight_map = index["weight_map"]
    files = sorted(set(weight_map.values()))
    assert len(files) >= 2, f"{dirpath}: expected >= 2 shards, got {files}"
    out: dict[str, torch.Tensor] = {}
    for f in files:
        shard = read_single_file(dirpath / f)
        for k, v in shard.items():
            assert k not in out, f"{k} in two shards"
            assert weight_map[k] == f, f"{k}: index says {weight_map[k]}, found in {f}"
            out[k] = v
    assert set(out) == set(weight_map), "index and shard contents disagree"
    return out


def read_sharded_optimizer(dirpath: str | os.PathLike) -> tuple[dict[int, dict], list[dict]]:
    from colossalai.utils.safetensors import load_flat

    dirpath = Path(dirpath)
    _, index = _index_of(dirpath)
    assert set(index) == {"metadata", "weight_map"}, index.keys()
    groups = _load_torch(dirpath / index["metadata"]["param_groups"])
    weight_map = index["weight_map"]
    files = sorted(set(weight_map.values()))
    assert len(files) >= 2, f"{dirpath}: expected >= 2 shards, got {files}"
    state: dict[int, dict] = {}
    for f in files:
        shard = (
            load_flat(str(dirpath / f)) if f.endswith(".safetensors") else _load_torch(dirpath / f)
        )
        for pid, s in shard.items():
            assert isinstance(pid, int) and pid not in state
            assert weight_map[str(pid)] == f
            state[pid] = s
    assert {str(k) for k in state} == set(weight_map)
    return state, groups


def _rel(out: Path, p: str | os.PathLike) -> str:
    return Path(p).resolve().relative_to(out.resolve()).as_posix()


def _tiny_llama(tie: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    return LlamaForCausalLM(LlamaConfig(**LLAMA_KW, tie_word_embeddings=tie))


def _batch(gen: torch.Generator) -> torch.Tensor:
    return torch.randint(0, LLAMA_KW["vocab_size"], (2, 8), generator=gen)


def _optimizer_and_scheduler(model: torch.nn.Module):
    from colossalai.nn.lr_scheduler import CosineAnnealingWarmupLR

    optim = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = CosineAnnealingWarmupLR(optim, total_steps=10, warmup_steps=2)
    return optim, sched


# ----------------------------------------------------------------------------------------------
# Synchronous stand-ins for tensornvme / pinned memory (async section only)
# ----------------------------------------------------------------------------------------------


class _SyncFileWriter:
    """Stand-in for tensornvme.async_file_io.AsyncFileWriter: the same calls, done synchronously."""

    def __init__(self, path: str, n_entries: int = 32, backend: str = "pthread", n_tasks: int = 0):
        self._fh = open(path, "wb")  # noqa: SIM115 - closed in synchronize()
        self.offset = 0

    def _write_at(self, data: bytes, offset: int) -> None:
        self._fh.seek(offset)
        self._fh.write(data)
        self.offset = max(self.offset, offset + len(data))

    def write(self, data: bytes) -> None:
        self._write_at(bytes(data), self.offset)

    def write_raw(self, tensor: torch.Tensor, ptr: int, nbytes: int, offset: int) -> None:
        assert tensor.data_ptr() == ptr and tensor.is_contiguous()
        data = tensor.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()
        assert len(data) == nbytes, (len(data), nbytes)
        self._write_at(data, offset)

    def register_h2d(self, num_tensors: int) -> None:
        pass

    def write_tensor(self, tensor: torch.Tensor, pinned: torch.Tensor | None = None) -> None:
        if pinned is not None:  # the real writer copies into the pinned buffer, then writes it
            pinned.copy_(tensor)
            tensor = pinned
        tensor = tensor.contiguous()
        n = tensor.numel() * tensor.element_size()
        self.write_raw(tensor, tensor.data_ptr(), n, self.offset)

    def sync_before_step(self) -> None:
        pass

    def synchronize(self) -> None:
        if not self._fh.closed:
            self._fh.close()


def _unpinned(tensor: torch.Tensor, empty: bool = True) -> torch.Tensor:
    return torch.empty_like(tensor, device="cpu") if empty else tensor.clone()


@contextlib.contextmanager
def _async_stand_ins():
    import colossalai.checkpoint_io.utils as cio_utils
    import colossalai.utils.safetensors as cst

    had_writer = hasattr(cst, "AsyncFileWriter")
    old_writer = getattr(cst, "AsyncFileWriter", None)
    old_pin = cio_utils._pin_tensor
    cst.AsyncFileWriter = _SyncFileWriter
    cio_utils._pin_tensor = _unpinned
    try:
        yield
    finally:
        cio_utils._pin_tensor = old_pin
        if had_writer:
            cst.AsyncFileWriter = old_writer
        else:
            del cst.AsyncFileWriter


# ----------------------------------------------------------------------------------------------
# Part 1 + 2: GeneralCheckpointIO and the async writer, in this process
# ----------------------------------------------------------------------------------------------


def make_general(out: Path) -> dict[str, Any]:
    from colossalai.checkpoint_io import GeneralCheckpointIO

    cases: dict[str, Any] = {}
    g = out / "general"
    g.mkdir(parents=True)

    # safetensors refuses shared tensors in one file, so this model is untied
    model = _tiny_llama(tie=False)
    optim, sched = _optimizer_and_scheduler(model)
    gen = torch.Generator().manual_seed(SEED)
    for _ in range(STEPS):
        ids = _batch(gen)
        model(input_ids=ids, labels=ids).loss.backward()
        optim.step()
        optim.zero_grad()
        sched.step()
    msd = model.state_dict()
    osd = optim.state_dict()
    io = GeneralCheckpointIO()

    def check_reload(path: Path) -> None:
        fresh = _tiny_llama(tie=False)
        io.load_model(fresh, str(path), strict=True)
        for k, v in fresh.state_dict().items():
            _assert_same_tensor(k, v, msd[k])

    # unsharded model files
    for cid, name, st, fam in (
        ("general_model_bin", "model.bin", False, "torch-zip"),
        ("general_model_safetensors", "model.safetensors", True, "safetensors"),
    ):
        p = g / name
        io.save_model(model, str(p), shard=False, use_safetensors=st)
        check_reload(p)
        cases[cid] = case(
            _rel(out, p), fam, "model", tensors=model_tensors(msd, read_single_file(p))
        )

    # sharded model dirs (.bin / .safetensors shards, with and without a prefix)
    for cid, dirname, st, prefix in (
        ("general_sharded_bin", "sharded_bin", False, None),
        ("general_sharded_safetensors", "sharded_safetensors", True, None),
        ("general_sharded_prefix_bin", "sharded_prefix_bin", False, PREFIX),
        ("general_sharded_prefix_safetensors", "sharded_prefix_safetensors", True, PREFIX),
    ):
        p = g / dirname
        io.save_model(
            model, str(p), shard=True, prefix=prefix, size_per_shard=SHARD_MB, use_safetensors=st
        )
        check_reload(p)
        cases[cid] = case(
            _rel(out, p),
            "colossalai-sharded-model",
            "model",
            tensors=model_tensors(msd, read_sharded_model(p)),
        )

    # unsharded optimizer file
    p = g / "optimizer.bin"
    io.save_optimizer(optim, str(p), shard=False)
    disk = _load_torch(p)
    assert set(disk) == {"state", "param_groups"}
    cases["general_optimizer_file"] = case(
        _rel(out, p),
        "torch-zip",
        "optimizer",
        **optimizer_fields(osd["state"], osd["param_groups"], disk["state"], disk["param_groups"]),
    )

    # sharded optimizer dirs
    for cid, dirname, prefix in (
        ("general_optimizer_sharded", "optimizer_sharded", None),
        ("general_optimizer_sharded_prefix", "optimizer_sharded_prefix", PREFIX),
    ):
        p = g / dirname
        io.save_optimizer(optim, str(p), shard=True, prefix=prefix, size_per_shard=SHARD_MB)
        dstate, dgroups = read_sharded_optimizer(p)
        cases[cid] = case(
            _rel(out, p),
            "colossalai-sharded-optimizer",
            "optimizer",
            **optimizer_fields(osd["state"], osd["param_groups"], dstate, dgroups),
        )

    # LR scheduler (ColossalAI's CosineAnnealingWarmupLR: a delayed scheduler)
    p = g / "lr_scheduler"
    io.save_lr_scheduler(sched, str(p))
    cases["general_lr_scheduler"] = case(
        _rel(out, p),
        "torch-zip",
        "scheduler",
        values=scheduler_values(sched.state_dict(), _load_torch(p)),
    )

    cases.update(make_async(out, model, optim))
    return cases


def _flat_roundtrip(path: Path, sd: dict[str, Any]) -> dict[str, Any]:
    """load_flat a full optimizer file and compare it with the state_dict that was saved."""
    from colossalai.utils.safetensors import load_flat

    back = load_flat(str(path))
    assert set(back) == {"state", "param_groups"}, back.keys()
    return optimizer_fields(sd["state"], sd["param_groups"], back["state"], back["param_groups"])


def make_async(out: Path, model: torch.nn.Module, optim: torch.optim.Optimizer) -> dict[str, Any]:
    import colossalai.utils.safetensors as cst
    from colossalai.checkpoint_io import GeneralCheckpointIO
    from colossalai.nn.optimizer import Lamb
    from safetensors import safe_open
    from safetensors.torch import load_file

    cases: dict[str, Any] = {}
    a = out / "async"
    a.mkdir(parents=True)
    msd = model.state_dict()
    osd = optim.state_dict()

    # ColossalAI's Lamb keeps an int `step`: a non-tensor state, stored pickled as U8
    torch.manual_seed(SEED)
    small = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    lamb = Lamb(small.parameters(), lr=1e-3)
    for _ in range(STEPS):
        small(torch.randn(4, 8)).square().mean().backward()
        lamb.step()
        lamb.zero_grad()
    lamb_sd = lamb.state_dict()
    assert isinstance(lamb_sd["state"][0]["step"], int)

    with _async_stand_ins():
        # colossalai.utils.safetensors.save on a model state dict
        p = a / "model.safetensors"
        cst.save(str(p), msd).synchronize()
        cases["async_save_model"] = case(
            _rel(out, p),
            "colossalai-safetensors",
            "model",
            tensors=model_tensors(msd, load_file(str(p))),
        )

        # save_nested on full optimizer state dicts (AdamW: tensor steps; Lamb: int steps)
        for cid, name, sd in (
            ("async_save_nested_optimizer", "optimizer.safetensors", osd),
            ("async_save_nested_optimizer_int_step", "optimizer_lamb.safetensors", lamb_sd),
        ):
            p = a / name
            cst.save_nested(str(p), sd).synchronize()
            with safe_open(str(p), framework="pt") as fh:
                assert "non_tensor_keys" in fh.metadata()
            cases[cid] = case(
                _rel(out, p), "colossalai-flat-optimizer", "optimizer", **_flat_roundtrip(p, sd)
            )

        # GeneralCheckpointIO(use_async=True): move_and_save / async_move_save_state_dict_shards
        io = GeneralCheckpointIO()
        p = a / "io_model.safetensors"
        io.save_model(model, str(p), shard=False, use_safetensors=True, use_async=True)
        io._sync_io()
        cases["general_async_model_file"] = case(
            _rel(out, p),
            "colossalai-safetensors",
            "model",
            tensors=model_tensors(msd, load_file(str(p))),
        )

        p = a / "io_optimizer.safetensors"
        io.save_optimizer(optim, str(p), shard=False, use_async=True)
        io._sync_io()
        cases["general_async_optimizer_file"] = case(
            _rel(out, p), "colossalai-flat-optimizer", "optimizer", **_flat_roundtrip(p, osd)
        )

        p = a / "io_sharded_model"
        io.save_model(
            model, str(p), shard=True, size_per_shard=SHARD_MB, use_safetensors=True, use_async=True
        )
        io._sync_io()
        assert (p / "model.safetensors.index.json").is_file()
        cases["general_async_sharded_model"] = case(
            _rel(out, p),
            "colossalai-sharded-model",
            "model",
            tensors=model_tensors(msd, read_sharded_model(p)),
        )

        p = a / "io_sharded_optimizer"
        io.save_optimizer(optim, str(p), shard=True, size_per_shard=SHARD_MB, use_async=True)
        io._sync_io()
        assert (p / "optimizer.safetensors.index.json").is_file()
        dstate, dgroups = read_sharded_optimizer(p)
        cases["general_async_sharded_optimizer"] = case(
            _rel(out, p),
            "colossalai-sharded-optimizer",
            "optimizer",
            **optimizer_fields(osd["state"], osd["param_groups"], dstate, dgroups),
        )
        del io
    return cases


# ----------------------------------------------------------------------------------------------
# Part 3-5: Booster workers (run in subprocesses)
# ----------------------------------------------------------------------------------------------


def _launch() -> None:
    import torch.distributed as dist

    # colossalai 0.5.0's p2p code calls it; torch 2.13 no longer has it
    if not hasattr(dist, "is_hccl_available"):
        dist.is_hccl_available = lambda: False
    import colossalai

    colossalai.launch_from_torch(backend="gloo")


def _prefixed(part: str, d: dict[str, Any]) -> dict[str, Any]:
    return {f"{part}/{k}": v for k, v in d.items()}


def worker_ddp(out: Path) -> dict[str, Any]:
    from colossalai.booster import Booster
    from colossalai.booster.plugin import TorchDDPPlugin

    _launch()
    model = _tiny_llama(tie=True)  # tied: both names land in the DDP save
    optim, sched = _optimizer_and_scheduler(model)
    booster = Booster(plugin=TorchDDPPlugin())
    model, optim, _, _, sched = booster.boost(model, optim, lr_scheduler=sched)
    gen = torch.Generator().manual_seed(SEED)
    for _ in range(STEPS):
        ids = _batch(gen)
        booster.backward(model(input_ids=ids, labels=ids).loss, optim)
        optim.step()
        optim.zero_grad()
        sched.step()

    msd = model.unwrap().state_dict()
    assert _tied_duplicates(msd) == {"lm_head.weight"}
    osd = optim.unwrap().state_dict()
    ssd = sched.state_dict()
    cases: dict[str, Any] = {}

    # ColossalChat convention: epoch-E_step-S/{modeling, optimizer, lr_scheduler, running_states.json}
    ts = out / "ddp" / f"epoch-{EPOCH}_step-{STEPS}"
    booster.save_model(model, str(ts / "modeling"), shard=True, size_per_shard=SHARD_MB)
    booster.save_optimizer(optim, str(ts / "optimizer"), shard=True, size_per_shard=SHARD_MB)
    booster.save_lr_scheduler(sched, str(ts / "lr_scheduler"))
    running = {"epoch": EPOCH, "step": STEPS, "sample_start_index": STEPS * BATCH}
    with open(ts / "running_states.json", "w", encoding="utf-8") as fh:
        json.dump(running, fh, indent=4)

    m_t = model_tensors(msd, read_sharded_model(ts / "modeling"))
    dstate, dgroups = read_sharded_optimizer(ts / "optimizer")
    o_f = optimizer_fields(osd["state"], osd["param_groups"], dstate, dgroups)
    s_v = scheduler_values(ssd, _load_torch(ts / "lr_scheduler"))
    with open(ts / "running_states.json", encoding="utf-8") as fh:
        assert json.load(fh) == running

    cases["ddp_training_state"] = case(
        _rel(out, ts),
        "training-state",
        "training_state",
        tensors={**_prefixed("modeling", m_t), **_prefixed("optimizer", o_f["tensors"])},
        values={**_prefixed("lr_scheduler", s_v), **_prefixed("running_states.json", running)},
        parts={
            "modeling": "colossalai-sharded-model",
            "optimizer": "colossalai-sharded-optimizer",
            "lr_scheduler": "torch-zip",
            "running_states.json": "running-states-json",
        },
    )
    cases["ddp_sharded_model"] = case(
        _rel(out, ts / "modeling"), "colossalai-sharded-model", "model", tensors=m_t
    )
    cases["ddp_sharded_optimizer"] = case(
        _rel(out, ts / "optimizer"), "colossalai-sharded-optimizer", "optimizer", **o_f
    )
    cases["ddp_lr_scheduler"] = case(
        _rel(out, ts / "lr_scheduler"), "torch-zip", "scheduler", values=s_v
    )
    cases["running_states_json"] = case(
        _rel(out, ts / "running_states.json"),
        "running-states-json",
        "running_state",
        values=running,
    )

    # the other convention: <dir>/{model, optim, lr_scheduler, meta.pt}
    gs = out / "ddp" / f"global_step{STEPS}"
    booster.save_model(model, str(gs / "model"), shard=True, size_per_shard=SHARD_MB)
    booster.save_optimizer(optim, str(gs / "optim"), shard=True, size_per_shard=SHARD_MB)
    booster.save_lr_scheduler(sched, str(gs / "lr_scheduler"))
    meta = {"torch_rng": torch.get_rng_state(), "epoch": EPOCH, "step": STEPS}
    torch.save(meta, gs / "meta.pt")

    m_t2 = model_tensors(msd, read_sharded_model(gs / "model"))
    dstate, dgroups = read_sharded_optimizer(gs / "optim")
    o_f2 = optimizer_fields(osd["state"], osd["param_groups"], dstate, dgroups)
    s_v2 = scheduler_values(ssd, _load_torch(gs / "lr_scheduler"))
    meta_disk = _load_torch(gs / "meta.pt")
    _assert_same_tensor("torch_rng", meta["torch_rng"], meta_disk["torch_rng"])
    assert meta_disk["epoch"] == EPOCH and meta_disk["step"] == STEPS
    meta_t = {"torch_rng": _tensor_entry(meta["torch_rng"])}
    meta_v = {"epoch": EPOCH, "step": STEPS}

    cases["ddp_training_state_meta"] = case(
        _rel(out, gs),
        "training-state",
        "training_state",
        tensors={
            **_prefixed("model", m_t2),
            **_prefixed("optim", o_f2["tensors"]),
            **_prefixed("meta.pt", meta_t),
        },
        values={**_prefixed("lr_scheduler", s_v2), **_prefixed("meta.pt", meta_v)},
        parts={
            "model": "colossalai-sharded-model",
            "optim": "colossalai-sharded-optimizer",
            "lr_scheduler": "torch-zip",
            "meta.pt": "torch-zip",
        },
    )
    cases["meta_pt"] = case(
        _rel(out, gs / "meta.pt"), "torch-zip", "rng", tensors=meta_t, values=meta_v
    )
    return cases


def _hybrid_expected_optimizer(optim) -> tuple[dict[int, dict], list[dict]]:
    """The Hybrid optimizer's state keyed by ColossalAI's own global ids (param_info)."""
    info = optim.param_info
    m2w = optim.get_master_to_working_map()
    state: dict[int, dict] = {}
    for param, s in optim.optim.state.items():
        working = m2w[id(param)] if m2w is not None else param
        state[info["param2id"][id(working)]] = {
            k: (v.detach().cpu().clone() if isinstance(v, torch.Tensor) else v)
            for k, v in s.items()
        }
    groups = [
        {**group, "params": ginfo["params"]}
        for group, ginfo in zip(optim.param_groups, info["param_groups"], strict=True)
    ]
    return state, groups


def _hybrid_train(pp_size: int, tie: bool):
    from colossalai.booster import Booster
    from colossalai.booster.plugin import HybridParallelPlugin

    _launch()
    model = _tiny_llama(tie=tie)
    optim, sched = _optimizer_and_scheduler(model)
    kw = {"num_microbatches": 2} if pp_size > 1 else {}
    plugin = HybridParallelPlugin(tp_size=1, pp_size=pp_size, precision="fp32", **kw)
    booster = Booster(plugin=plugin)
    model, optim, _, _, sched = booster.boost(model, optim, lr_scheduler=sched)
    gen = torch.Generator().manual_seed(SEED)
    for _ in range(STEPS):
        ids = _batch(gen)
        if pp_size > 1:
            booster.execute_pipeline(
                iter([{"input_ids": ids, "labels": ids}]),
                model,
                lambda outputs, inputs: outputs.loss,
                optim,
                return_loss=True,
            )
        else:
            booster.backward(model(input_ids=ids, labels=ids).loss, optim)
        optim.step()
        optim.zero_grad()
        sched.step()
    return booster, model, optim, sched


def worker_hybrid(out: Path) -> dict[str, Any]:
    import transformers

    assert transformers.__version__.startswith("4."), transformers.__version__
    booster, model, optim, _ = _hybrid_train(pp_size=1, tie=True)
    msd = {k: v.detach().cpu().clone() for k, v in model.unwrap().state_dict().items()}
    # keep the tie information for the check below
    tied = _tied_duplicates(model.unwrap().state_dict())
    assert tied == {"lm_head.weight"}, tied
    state, groups = _hybrid_expected_optimizer(optim)

    h = out / "hybrid"
    booster.save_model(model, str(h / "modeling"), shard=True, size_per_shard=SHARD_MB)
    booster.save_optimizer(optim, str(h / "optimizer"), shard=True, size_per_shard=SHARD_MB)
    assert (h / "modeling" / "config.json").is_file()

    disk = read_sharded_model(h / "modeling")
    assert set(msd) - set(disk) == tied, "expected exactly the tied lm_head to be omitted"
    m_t = model_tensors({k: v for k, v in msd.items() if k not in tied}, disk)
    dstate, dgroups = read_sharded_optimizer(h / "optimizer")
    return {
        "hybrid_sharded_model": case(
            _rel(out, h / "modeling"), "colossalai-sharded-model", "model", tensors=m_t
        ),
        "hybrid_sharded_optimizer": case(
            _rel(out, h / "optimizer"),
            "colossalai-sharded-optimizer",
            "optimizer",
            **optimizer_fields(state, groups, dstate, dgroups),
        ),
    }


def worker_pipeline(out: Path) -> dict[str, Any] | None:
    import colossalai.checkpoint_io.hybrid_parallel_checkpoint_io as hpio
    import torch.distributed as dist
    import transformers

    assert transformers.__version__.startswith("4."), transformers.__version__
    booster, model, optim, _ = _hybrid_train(pp_size=2, tie=False)
    rank = dist.get_rank()
    assert dist.get_world_size() == 2

    # copy the real per-stage temp indexes aside just before ColossalAI deletes them
    snapshots: dict[str, Path] = {}
    snap_root = Path(tempfile.mkdtemp(prefix="cai_pp_snap_"))
    real_rmtree = hpio.rmtree

    def rmtree_with_snapshot(path, *args, **kwargs):
        dst = snap_root / str(len(snapshots))
        shutil.copytree(path, dst)
        snapshots[str(Path(path).parent.resolve())] = dst
        return real_rmtree(path, *args, **kwargs)

    hpio.rmtree = rmtree_with_snapshot
    p = out / "pipeline"
    try:
        booster.save_model(model, str(p / "modeling"), shard=True, size_per_shard=SHARD_MB)
        booster.save_optimizer(optim, str(p / "optimizer"), shard=True, size_per_shard=SHARD_MB)
    finally:
        hpio.rmtree = real_rmtree
    dist.barrier()

    # each stage's own tensors and optimizer states, gathered to rank 0
    local_model = {k: v.detach().cpu().clone() for k, v in model.unwrap().state_dict().items()}
    local_state, groups = _hybrid_expected_optimizer(optim)
    gathered: list[Any] = [None, None]
    dist.all_gather_object(gathered, (local_model, local_state))
    if rank != 0:
        shutil.rmtree(snap_root, ignore_errors=True)
        return None

    msd: dict[str, torch.Tensor] = {}
    state: dict[int, dict] = {}
    for stage_model, stage_state in gathered:
        assert not set(stage_model) & set(msd)
        assert not set(stage_state) & set(state)
        msd.update(stage_model)
        state.update(stage_state)

    model_dir = p / "modeling"
    assert list(model_dir.glob("*-stage-00002-shard-*.bin")), "no stage-2 shards"
    m_t = model_tensors(msd, read_sharded_model(model_dir))
    dstate, dgroups = read_sharded_optimizer(p / "optimizer")
    cases = {
        "pipeline_sharded_model": case(
            _rel(out, model_dir), "colossalai-sharded-model", "model", tensors=m_t
        ),
        "pipeline_sharded_optimizer": case(
            _rel(out, p / "optimizer"),
            "colossalai-sharded-optimizer",
            "optimizer",
            **optimizer_fields(state, groups, dstate, dgroups),
        ),
    }

    # interrupted save: real stage shards + the real tmp_index_files/, no final index
    snap = snapshots[str(model_dir.resolve())]
    intr = p / "modeling_interrupted"
    intr.mkdir()
    shutil.copytree(snap, intr / "tmp_index_files")
    for f in sorted(set(_tmp_indexes_of(intr).values())):
        shutil.copy2(model_dir / f, intr / f)
    shutil.rmtree(snap_root)
    cases["pipeline_interrupted_model"] = case(
        _rel(out, intr),
        "colossalai-sharded-model",
        "model",
        tensors=model_tensors(msd, read_sharded_model(intr, interrupted=True)),
    )
    return cases


WORKERS = {"ddp": worker_ddp, "hybrid": worker_hybrid, "pipeline": worker_pipeline}


def _worker_main(name: str, out: Path, result: Path) -> None:
    import transformers

    cases = WORKERS[name](out)
    if cases is not None:
        with open(result, "w", encoding="utf-8") as fh:
            json.dump({"cases": cases, "transformers": transformers.__version__}, fh)


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------


def _run_worker(
    name: str, out: Path, tmp: Path, nproc: int, transformers4: bool
) -> tuple[dict[str, Any], str]:
    """Run one worker; return its cases and the transformers version it ran with."""
    result = tmp / f"{name}.json"
    env = dict(os.environ)
    if transformers4:
        path_first(
            env, side_folder("transformers", "CAI_TRANSFORMERS4_DIR", "transformers4", "tf451")
        )
    port = str(free_port())
    env.update(OMP_NUM_THREADS="1", MASTER_ADDR=LOCALHOST, MASTER_PORT=port)
    script = [str(Path(__file__).resolve()), "--worker", name, str(out), str(result)]
    if nproc == 1:
        env.update(launcher_env(port=port))
        cmd = [sys.executable, *script]
    else:
        for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
            env.pop(k, None)
        cmd = torchrun_cmd(nproc, port, *script)
    t0 = time.time()
    run_session(cmd, env, f"worker {name!r}", result, SUBPROCESS_TIMEOUT_S, tail=30000)
    print(f"[colossalai_maker] {name}: {time.time() - t0:.1f}s", file=sys.stderr)
    with open(result, encoding="utf-8") as fh:
        res = json.load(fh)
    return res["cases"], res["transformers"]


def _validate(out: Path, cases: dict[str, Any]) -> None:
    kinds = {"model", "optimizer", "scheduler", "rng", "running_state", "training_state", "adapter"}
    for cid, c in cases.items():
        assert (out / c["path"]).exists(), f"{cid}: {c['path']} does not exist"
        assert c["kind"] in kinds, f"{cid}: kind {c['kind']}"
        assert c.get("tensors") or c.get("values"), f"{cid}: nothing to check"
        if c["kind"] == "training_state":
            for part in c["parts"]:
                assert (out / c["path"] / part).exists(), f"{cid}: part {part} missing"


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[1] == "--worker":
        _worker_main(argv[2], Path(argv[3]), Path(argv[4]))
        leave_worker()
        return 0
    if len(argv) != 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    out = Path(argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in OUTPUTS:  # remove only what an earlier run of this maker wrote
        old = out / name
        if old.is_dir():
            shutil.rmtree(old)
        elif old.exists():
            old.unlink()
    t0 = time.time()

    import colossalai
    import transformers

    cases = make_general(out)
    versions = {"general": transformers.__version__}
    print(f"[colossalai_maker] general+async: {time.time() - t0:.1f}s", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="cai_maker_") as tmp:
        for name, nproc, tf4 in (("ddp", 1, False), ("hybrid", 1, True), ("pipeline", 2, True)):
            part, versions[name] = _run_worker(name, out, Path(tmp), nproc, tf4)
            dup = set(part) & set(cases)
            assert not dup, f"duplicate case ids {dup}"
            cases.update(part)
    _validate(out, cases)

    manifest = {
        "tool": "colossalai",
        "version": colossalai.__version__,
        "torch": torch.__version__,
        "transformers": versions,
        "cases": cases,
    }
    with open(out / "manifest.json", "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    print(
        f"[colossalai_maker] {len(cases)} cases in {time.time() - t0:.1f}s -> {out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
