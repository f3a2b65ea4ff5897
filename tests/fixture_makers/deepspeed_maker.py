"""DeepSpeed fixtures: `python tests/fixture_makers/deepspeed_maker.py OUT_DIR`.

ZeRO stages 0, 1, 2 and 3 on CPU (DS_ACCELERATOR=cpu, gloo, a world of 1), each in its own
subprocess (env RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=<free>): a tiny
fp32 model (Linear(4,5), BatchNorm1d(5), ReLU, Linear(5,3)), torch AdamW as the client optimizer
(zero_allow_untested_optimizer) with 2 param groups (group 0 = 25 elements, odd on purpose, so
ZeRO 1/2 pad it), 2 training steps, then engine.save_checkpoint(case_dir) (default tag
"global_step2"). One extra case, ds_zero2_bf16, is ZeRO-2 with bf16 enabled (LayerNorm instead of
BatchNorm, whose fp32 buffers bf16 mode rejects): bf16 module weights, fp32 master weights in
`bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt`.
Cases "ds_zero0" .. "ds_zero3", "ds_zero2_bf16" (family "deepspeed", kind "training_state"):
- "parts": every .pt file (relative to the case folder) -> "torch-zip" (`latest` is a text file;
  stages 1-3 also copy zero_to_fp32.py and zero_to_torch.py into the case folder);
- "values": {"latest": <tag>, "zero_stage": N, "global_steps": 2};
- "tensors": "model/<name>" for each entry of the model_states file's `module` dict, as the engine's
  module.state_dict() holds it (checked equal to the file). Under ZeRO-3 the parameters there are
  empty float32 placeholders of shape [0] (taken from the file; buffers are real);
- "zero3_param_shapes" (ZeRO-3 only): the file's `param_shapes`, a list (one per param group) of
  {name: shape};
- extra "fp32_weights": the fp32 master weights (stage 0: the module params; stages 1-3:
  deepspeed.utils.safe_get_full_fp32_param), checked equal to DeepSpeed's own zero_to_fp32
  reconstruction and to a plain-torch rebuild from the optim file (single_partition_of_fp32_groups
  / fp32_flat_groups sliced in param_shapes order);
- extra "file_keys": top-level keys of each part, and "unsafe_globals": for each part, the globals
  that torch.load(weights_only=True) refuses (torch.serialization.get_unsafe_globals_in_checkpoint).
DeepSpeed's TorchBackend JIT-compiles a shared-memory all-reduce kernel on first use (~50 s, g++);
it only speeds up multi-rank CPU all-reduce and plays no part in the checkpoint, so the child stubs
`deepspeed.comm.torch.build_shm_op` out. Set DS_MAKER_BUILD_SHM=1 to build it as DeepSpeed would.
Runs in 45-95 s (five ~10-20 s subprocesses, 2 at a time: DS_MAKER_JOBS); outputs about 330 KB
(mostly the copied zero_to_fp32.py scripts). DS_MAKER_VERBOSE=1 prints each optim file's layout.
"""

from __future__ import annotations

import enum
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from _manifest import fresh_dir, main_out_dir, run_maker, tensor_entry

CHILD_FLAG = "--ds-child"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ----------------------------------------------------------------------------------------- child


def _rebuild_fp32(optim_sd: dict[str, Any], param_shapes: list[dict[str, Any]], stage: int) -> dict:
    """Plain-torch fp32 rebuild for a world of 1 (what a reader without deepspeed has to do)."""
    out: dict[str, torch.Tensor] = {}
    if stage in (1, 2):
        flats = optim_sd["single_partition_of_fp32_groups"]
        align_pads = optim_sd.get("param_alignment_paddings")
        for g, (shapes, flat) in enumerate(zip(param_shapes, flats, strict=True)):
            offset = 0
            for i, (name, shape) in enumerate(shapes.items()):
                n = math.prod(shape)
                out[name] = flat.narrow(0, offset, n).view(shape).clone()
                offset += n + (align_pads[g][i] if align_pads else 0)
    elif stage == 3:
        flat = torch.cat(optim_sd["fp32_flat_groups"], 0)
        offset = 0
        for shapes in param_shapes:
            for name, shape in shapes.items():
                n = math.prod(shape)  # world 1: partitioned numel == numel, no padding
                out[name] = flat.narrow(0, offset, n).view(shape).clone()
                offset += n
        if offset != flat.numel():
            raise AssertionError(f"ZeRO-3 rebuild consumed {offset} of {flat.numel()}")
    return out


def _describe(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return {"tensor": tensor_entry(v)}
    if isinstance(v, dict):
        return {str(k): _describe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_describe(x) for x in v]
    if isinstance(v, enum.Enum):
        return f"<{type(v).__module__}.{type(v).__qualname__}.{v.name} = {v.value!r}>"
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return f"<{type(v).__module__}.{type(v).__qualname__}: {v!r}>"[:300]


def _child(stage: int, variant: str, case_dir: Path, result_path: Path) -> None:
    if os.environ.get("DS_MAKER_BUILD_SHM") != "1":
        import deepspeed.comm.torch

        # via sys.modules: the attribute deepspeed.comm.torch is the torch package itself
        sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]
    import deepspeed
    from deepspeed.utils import safe_get_full_fp32_param
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    from torch import nn

    bf16 = variant == "bf16"
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    # BatchNorm gives buffers (real even under ZeRO-3); DeepSpeed's bf16 mode casts params but
    # not buffers, which BatchNorm rejects, so the bf16 variant uses LayerNorm.
    norm = nn.LayerNorm(5) if bf16 else nn.BatchNorm1d(5)
    model = nn.Sequential(nn.Linear(4, 5), norm, nn.ReLU(), nn.Linear(5, 3))
    groups: list[dict[str, Any]] = [
        {"params": list(model[0].parameters())},
        {"params": list(model[1].parameters()) + list(model[3].parameters()), "lr": 1e-2},
    ]
    optimizer = torch.optim.AdamW(
        groups,
        lr=1e-3,
    )
    config = {
        "train_batch_size": 4,
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "bf16": {"enabled": bf16},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1000,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    for _ in range(2):
        x = torch.randn(4, 4)
        loss = engine(x.bfloat16() if bf16 else x).float().square().mean()
        engine.backward(loss)
        engine.step()
    engine.save_checkpoint(str(case_dir))

    module_sd = {k: v.detach().clone() for k, v in engine.module.state_dict().items()}
    params = list(engine.module.named_parameters())
    if stage == 0:
        if bf16:
            raise ValueError("the bf16 variant is only made for ZeRO stages 1-3")
        fp32 = {n: p.detach().clone() for n, p in params}
    else:  # DeepSpeed's own accessor of the fp32 master weights (gathers under ZeRO-3)
        fp32 = {n: safe_get_full_fp32_param(p).detach().clone() for n, p in params}
    if any(t.dtype != torch.float32 for t in fp32.values()):
        raise AssertionError("fp32 master weights are not float32")

    tag = (case_dir / "latest").read_text().strip()
    parts = sorted(str(p.relative_to(case_dir)) for p in case_dir.rglob("*.pt"))
    model_part = next(p for p in parts if p.endswith("model_states.pt"))
    optim_parts = [p for p in parts if p.endswith("optim_states.pt")]
    file_keys: dict[str, list[str]] = {}
    unsafe: dict[str, list[str]] = {}
    layout: dict[str, Any] = {}
    loaded: dict[str, Any] = {}
    for part in parts:
        path = case_dir / part
        unsafe[part] = sorted(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
        try:
            torch.load(path, map_location="cpu", weights_only=True)
            weights_only_ok = True
        except Exception:
            weights_only_ok = False
        if weights_only_ok != (not unsafe[part]):
            raise AssertionError(
                f"{part}: weights_only={weights_only_ok} but unsafe={unsafe[part]}"
            )
        loaded[part] = torch.load(path, map_location="cpu", weights_only=False)
        file_keys[part] = list(loaded[part])
        if part in optim_parts:
            layout[part] = _describe(loaded[part]["optimizer_state_dict"])

    model_file = loaded[model_part]
    if model_file["global_steps"] != 2:
        raise AssertionError(f"global_steps {model_file['global_steps']}")
    if list(model_file["module"]) != list(module_sd):
        raise AssertionError("module keys differ from engine.module.state_dict()")
    if stage == 3:
        # The file was written while the params were partitioned: each is an empty float32
        # placeholder; after save_checkpoint returns, engine.module.state_dict() shows them full
        # again, so the placeholders are taken from the file (buffers are checked below).
        for name in fp32:
            f = model_file["module"][name]
            if list(f.shape) != [0]:
                raise AssertionError(f"ZeRO-3 module[{name}] is {f.dtype} {list(f.shape)}")
            module_sd[name] = f
    for k, v in module_sd.items():
        f = model_file["module"][k]
        if not (f.dtype == v.dtype and torch.equal(f, v)):
            raise AssertionError(
                f"module[{k}] in the file ({f.dtype}, {list(f.shape)}) differs from "
                f"engine.module.state_dict() ({v.dtype}, {list(v.shape)})"
            )
    param_shapes = model_file["param_shapes"]

    if stage > 0:
        zero_fp32 = get_fp32_state_dict_from_zero_checkpoint(str(case_dir), tag=tag)
        rebuilt = _rebuild_fp32(loaded[optim_parts[0]]["optimizer_state_dict"], param_shapes, stage)
        for name, ref in fp32.items():
            for what, got in (("zero_to_fp32", zero_fp32), ("plain rebuild", rebuilt)):
                t = got[name].contiguous()
                if not (t.shape == ref.shape and torch.equal(t.to(ref.dtype), ref)):
                    raise AssertionError(f"{what}: {name} differs from the engine's fp32 param")

    result = {
        "tag": tag,
        "parts": parts,
        "module": {k: tensor_entry(v) for k, v in module_sd.items()},
        "fp32_weights": {k: tensor_entry(v) for k, v in fp32.items()},
        "param_shapes": None
        if param_shapes is None
        else [{n: list(s) for n, s in g.items()} for g in param_shapes],
        "file_keys": file_keys,
        "unsafe_globals": unsafe,
        "optim_layout": layout,
        "deepspeed": deepspeed.__version__,
    }
    result_path.write_text(json.dumps(result))


# ---------------------------------------------------------------------------------------- parent


SPECS = {  # case id -> (ZeRO stage, variant)
    "ds_zero0": (0, "fp32"),
    "ds_zero1": (1, "fp32"),
    "ds_zero2": (2, "fp32"),
    "ds_zero3": (3, "fp32"),
    "ds_zero2_bf16": (2, "bf16"),
}


def _run_child(out: Path, case_id: str) -> dict[str, Any]:
    """One case in its own process; its output is kept and shown only if it fails."""
    stage, variant = SPECS[case_id]
    case_dir = fresh_dir(out / case_id)
    env = dict(os.environ)
    env.update(
        DS_ACCELERATOR="cpu",
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
    )
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), CHILD_FLAG, str(stage), variant]
        proc = subprocess.run(
            [*cmd, str(case_dir), str(result_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0 or not result_path.is_file():
            raise RuntimeError(
                f"{case_id} child exited with {proc.returncode}; its output ends with:\n"
                + proc.stdout[-6000:]
            )
        return json.loads(result_path.read_text())


_FUTURES: dict[str, Future[dict[str, Any]]] = {}


def _run_case(out: Path, case_id: str) -> dict[str, Any]:
    if not _FUTURES:
        # Children run DS_MAKER_JOBS (default 2) at a time, one OMP thread each.
        pool = ThreadPoolExecutor(max_workers=int(os.environ.get("DS_MAKER_JOBS", "2")))
        for cid in SPECS:
            _FUTURES[cid] = pool.submit(_run_child, out, cid)
        pool.shutdown(wait=False)
    res = _FUTURES[case_id].result()
    stage, _ = SPECS[case_id]
    case: dict[str, Any] = {
        "path": case_id,
        "family": "deepspeed",
        "kind": "training_state",
        "parts": {p: "torch-zip" for p in res["parts"]},
        "values": {"latest": res["tag"], "zero_stage": stage, "global_steps": 2},
        "tensors": {f"model/{k}": v for k, v in res["module"].items()},
        "fp32_weights": res["fp32_weights"],
        "file_keys": res["file_keys"],
        "unsafe_globals": res["unsafe_globals"],
    }
    if stage == 3:
        case["zero3_param_shapes"] = res["param_shapes"]
    if os.environ.get("DS_MAKER_VERBOSE") == "1":
        print(json.dumps({case_id: res["optim_layout"]}, indent=1), file=sys.stderr)
    return {case_id: case}


CASES = {cid: (lambda out, cid=cid: _run_case(out, cid)) for cid in SPECS}


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == CHILD_FLAG:
        _child(int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), Path(sys.argv[5]))
        sys.exit(0)
    out_dir = main_out_dir(sys.argv)
    import importlib.metadata

    sys.exit(run_maker(out_dir, "deepspeed", importlib.metadata.version("deepspeed"), CASES))
