"""DeepSpeed fixtures: `python tests/fixture_makers/deepspeed_maker.py OUT_DIR`.

ZeRO stages 0, 1, 2 and 3 on CPU (DS_ACCELERATOR=cpu, gloo, a world of 1), each in its own
subprocess (env RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=<free>): a tiny
fp32 model (Linear(4,5), BatchNorm1d(5), ReLU, Linear(5,3)), torch AdamW as the client optimizer
(zero_allow_untested_optimizer) with 2 param groups (group 0 = 25 elements, odd on purpose, so
ZeRO 1/2 pad it), 2 training steps, then engine.save_checkpoint(case_dir) (default tag
"global_step2"). One extra case, ds_zero2_bf16, is ZeRO-2 with bf16 enabled (LayerNorm instead of
BatchNorm, whose fp32 buffers bf16 mode rejects): bf16 module weights, fp32 master weights in
`bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt`.
"ds_zero3_world2" is ZeRO-3 on 2 data-parallel ranks (two processes): each parameter is split
over both ranks' fp32_flat_groups (the last slice padded), two model-states files.
"ds_zero2_world2" is ZeRO-2 on 2 ranks with Linear(4,4), LayerNorm(4), ReLU, Linear(4,4) (groups
of 20 and 28 elements, no padding): each group's flat vector is split in two, so 0.weight and
3.weight straddle the ranks' partitions.
Two more cases train 3 steps with the usual weight-decay / no-decay split by ndim (group 0 =
the two Linear weights, group 1 = the other trainable parameters, interleaving the model order)
and a scheduler:
- "ds_zero3_warmup": ZeRO-3, DeepSpeed's WarmupLR from the config (`lr_scheduler` =
  {"last_batch_iteration": 2}); BatchNorm's bias is frozen and left out of the groups, so the
  model states hold it in `frozen_param_shapes` / `frozen_param_fragments`;
- "ds_zero2_steplr": ZeRO-2, a torch StepLR passed to deepspeed.initialize (`lr_scheduler` =
  StepLR.state_dict()).
Cases "ds_zero0" .. "ds_zero3", "ds_zero2_bf16", "ds_zero3_warmup", "ds_zero2_steplr" (family
"deepspeed", kind "training_state"):
- "parts": every .pt file (relative to the case folder) -> "torch-zip" (`latest` is a text file;
  stages 1-3 also copy zero_to_fp32.py and zero_to_torch.py into the case folder);
- "values": {"latest": <tag>, "zero_stage": N, "global_steps": <steps>, "global_samples": 4 x
  steps, "skipped_steps": 0} (the run position as the model states hold it);
- "tensors": "model/<name>" for each entry of the model_states file's `module` dict with the
  parameter's true shape and values: the file's own tensor for stages 0-2 (checked equal to
  engine.module.state_dict()); under ZeRO-3, where the file holds empty float32 placeholders of
  shape [0] (extra "module_as_saved" lists them), the parameter gathered with
  deepspeed.zero.GatheredParameters (checked equal to the fp32 master weight, cast);
- "optimizer_names": the client optimizer's parameter names in torch's id order (group by group);
  "optimizer_groups": per group its weight_decay and parameter count;
- "optim_states" (stages 1-3): per parameter name, exp_avg / exp_avg_sq as
  deepspeed.utils.safe_get_full_optimizer_state assembles them;
- "lr_scheduler": the model states' `lr_scheduler` value (None without a scheduler);
- "param_shapes" (stages 1-3): the file's `param_shapes`, a list (one per param group) of
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
Runs in 60-130 s (seven ~10-20 s subprocesses, 2 at a time: DS_MAKER_JOBS); outputs about 330 KB
(mostly the copied zero_to_fp32.py scripts). DS_MAKER_VERBOSE=1 prints each optim file's layout.
"""

from __future__ import annotations

import enum
import json
import math
import os
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from _manifest import (
    cpu_rank_env,
    free_port,
    fresh_dir,
    leave_worker,
    main_out_dir,
    run_maker,
    tensor_entry,
)

CHILD_FLAG = "--ds-child"


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


def _groups_of(model: Any, variant: str) -> list[dict[str, Any]]:
    """The client optimizer's param groups: by layer (fp32/bf16) or, for the scheduler
    variants, the usual weight-decay / no-decay split by ndim (interleaving the model order)."""
    if variant in ("warmup_lr", "torch_sched"):
        if variant == "warmup_lr":  # a frozen parameter, left out of the groups as Trainer does
            model[1].bias.requires_grad_(False)
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        return [
            {"params": [p for _, p in named if p.ndim >= 2], "weight_decay": 0.1},
            {"params": [p for _, p in named if p.ndim < 2], "weight_decay": 0.0},
        ]
    return [
        {"params": list(model[0].parameters())},
        {"params": list(model[1].parameters()) + list(model[3].parameters()), "lr": 1e-2},
    ]


def _full_state(engine: Any, param: Any, key: str, stage: int) -> torch.Tensor:
    """A parameter's optimizer state, assembled from DeepSpeed's own fragment mapping."""
    from deepspeed.utils import safe_get_full_optimizer_state

    if stage == 3:
        return safe_get_full_optimizer_state(param, key).detach().clone()
    # ZeRO-1/2: safe_get_full_optimizer_state only maps states as long as the fp32 partition,
    # but the base optimizer's states keep the group padding (it raises here). The same
    # fragment addresses, applied to the state of this rank's partition, then summed over
    # the ranks as DeepSpeed's get_full_hp_param does.
    full = torch.zeros(param.numel(), dtype=torch.float32)
    mapping = param._hp_mapping
    if mapping is not None:
        flat = engine.optimizer.single_partition_of_fp32_groups[mapping.param_group_index]
        state = engine.optimizer.optimizer.state[flat][key]
        lp, hp = mapping.lp_fragment_address, mapping.hp_fragment_address
        full.narrow(0, lp.start, lp.numel).copy_(state.narrow(0, hp.start, hp.numel))
    if torch.distributed.get_world_size() > 1:
        torch.distributed.all_reduce(full)
    return full.view(param.shape)


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
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.manual_seed(0)
    # BatchNorm gives buffers (real even under ZeRO-3); DeepSpeed's bf16 mode casts params but
    # not buffers, which BatchNorm rejects, so the bf16 variant uses LayerNorm.
    norm = nn.LayerNorm(5) if bf16 else nn.BatchNorm1d(5)
    model = nn.Sequential(nn.Linear(4, 5), norm, nn.ReLU(), nn.Linear(5, 3))
    if variant == "world2_z2":  # groups of 20 and 28 elements: no padding on 2 ranks
        model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.ReLU(), nn.Linear(4, 4))
    groups = _groups_of(model, variant)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    # torch numbers the client optimizer's params group by group, in each group's list order
    names_by_param = {p: n for n, p in model.named_parameters()}
    optimizer_names = [names_by_param[p] for g in groups for p in g["params"]]
    optimizer = torch.optim.AdamW(groups, lr=1e-3)
    group_info = [
        {"weight_decay": g["weight_decay"], "params": len(g["params"])}
        for g in optimizer.param_groups
    ]
    steps = 3 if variant in ("warmup_lr", "torch_sched") else 2
    lr_scheduler = None
    if variant == "torch_sched":
        lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    config: dict[str, Any] = {
        "train_batch_size": 4 * world,
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "bf16": {"enabled": bf16},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1000,
    }
    if variant == "warmup_lr":  # DeepSpeed's own scheduler, built from the config
        config["scheduler"] = {
            "type": "WarmupLR",
            "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 10},
        }
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=config, lr_scheduler=lr_scheduler
    )
    for _ in range(steps):
        x = torch.randn(4, 4)
        loss = engine(x.bfloat16() if bf16 else x).float().square().mean()
        engine.backward(loss)
        engine.step()
    engine.save_checkpoint(str(case_dir))

    module_sd = {k: v.detach().clone() for k, v in engine.module.state_dict().items()}
    every_param = list(engine.module.named_parameters())
    params = [(n, p) for n, p in every_param if p.requires_grad]
    if stage == 0:
        if bf16:
            raise ValueError("the bf16 variant is only made for ZeRO stages 1-3")
        fp32 = {n: p.detach().clone() for n, p in params}
    else:  # DeepSpeed's own accessor of the fp32 master weights (gathers under ZeRO-3)
        fp32 = {n: safe_get_full_fp32_param(p).detach().clone() for n, p in params}
    # per parameter, the optimizer states as DeepSpeed assembles them (stages 1-3)
    optim_states = {
        n: {k: tensor_entry(_full_state(engine, p, k, stage)) for k in ("exp_avg", "exp_avg_sq")}
        for n, p in params
        if stage > 0
    }
    # the parameters themselves (gathered under ZeRO-3, where the file holds placeholders)
    with deepspeed.zero.GatheredParameters([p for _, p in every_param], enabled=stage == 3):
        logical = {n: p.detach().clone() for n, p in every_param}
    for n, p in every_param:
        if not p.requires_grad and not torch.equal(logical[n], initial[n]):
            raise AssertionError(f"frozen {n} changed")
    if any(t.dtype != torch.float32 for t in fp32.values()):
        raise AssertionError("fp32 master weights are not float32")
    if rank != 0:  # the collectives are done; rank 0 checks the files and reports
        return

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
    if model_file["global_steps"] != steps:
        raise AssertionError(f"global_steps {model_file['global_steps']}")
    if list(model_file["module"]) != list(module_sd):
        raise AssertionError("module keys differ from engine.module.state_dict()")
    if stage == 3:
        # The file was written while the params were partitioned: each is an empty float32
        # placeholder; after save_checkpoint returns, engine.module.state_dict() shows them full
        # again, so the placeholders are taken from the file (buffers are checked below).
        for name in logical:
            f = model_file["module"][name]
            if list(f.shape) != [0]:
                raise AssertionError(f"ZeRO-3 module[{name}] is {f.dtype} {list(f.shape)}")
            module_sd[name] = f
            # the gathered parameter is the fp32 master weight (cast to the module dtype)
            if name in fp32 and not torch.equal(logical[name], fp32[name].to(logical[name].dtype)):
                raise AssertionError(f"ZeRO-3 {name}: gathered param differs from fp32 master")
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
        checks = [("zero_to_fp32", zero_fp32)]
        if world == 1:
            osd = loaded[optim_parts[0]]["optimizer_state_dict"]
            checks.append(("plain rebuild", _rebuild_fp32(osd, param_shapes, stage)))
        for name, ref in fp32.items():
            for what, got in checks:
                t = got[name].contiguous()
                if not (t.shape == ref.shape and torch.equal(t.to(ref.dtype), ref)):
                    raise AssertionError(f"{what}: {name} differs from the engine's fp32 param")

    sched = model_file["lr_scheduler"]
    if (sched is not None) != (variant in ("warmup_lr", "torch_sched")):
        raise AssertionError(f"lr_scheduler in the model states: {sched!r}")
    result = {
        "tag": tag,
        "parts": parts,
        "module": {k: tensor_entry(v) for k, v in module_sd.items()},
        "logical": {k: tensor_entry(logical.get(k, v)) for k, v in module_sd.items()},
        "optimizer_names": optimizer_names,
        "optimizer_groups": group_info,
        "optim_states": optim_states,
        "lr_scheduler": _describe(sched),
        "run": {k: model_file[k] for k in ("global_steps", "global_samples", "skipped_steps")},
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
    "ds_zero3_warmup": (3, "warmup_lr"),
    "ds_zero2_steplr": (2, "torch_sched"),
    "ds_zero3_world2": (3, "world2"),
    "ds_zero2_world2": (2, "world2_z2"),
}


def _run_child(out: Path, case_id: str) -> dict[str, Any]:
    """One case in its own process(es), one per rank; output kept and shown only on failure."""
    stage, variant = SPECS[case_id]
    world = 2 if variant.startswith("world2") else 1
    case_dir = fresh_dir(out / case_id)
    port = str(free_port())
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), CHILD_FLAG, str(stage), variant]
        procs = []
        for rank in range(world):
            procs.append(
                subprocess.Popen(
                    [*cmd, str(case_dir), str(result_path)],
                    env=cpu_rank_env(rank, world, port),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        outputs = [p.communicate(timeout=600)[0] for p in procs]
        codes = [p.returncode for p in procs]
        if any(codes) or not result_path.is_file():
            raise RuntimeError(
                f"{case_id} child exited with {codes}; its output ends with:\n"
                + "\n".join(o[-4000:] for o in outputs)
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
        "values": {"latest": res["tag"], "zero_stage": stage, **res["run"]},
        "tensors": {f"model/{k}": v for k, v in res["logical"].items()},
        "module_as_saved": res["module"],
        "fp32_weights": res["fp32_weights"],
        "optimizer_names": res["optimizer_names"],
        "optimizer_groups": res["optimizer_groups"],
        "optim_states": res["optim_states"],
        "lr_scheduler": res["lr_scheduler"],
        "param_shapes": res["param_shapes"],
        "file_keys": res["file_keys"],
        "unsafe_globals": res["unsafe_globals"],
    }
    if os.environ.get("DS_MAKER_VERBOSE") == "1":
        print(json.dumps({case_id: res["optim_layout"]}, indent=1), file=sys.stderr)
    return {case_id: case}


CASES = {cid: (lambda out, cid=cid: _run_case(out, cid)) for cid in SPECS}


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == CHILD_FLAG:
        _child(int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), Path(sys.argv[5]))
        leave_worker()
    out_dir = main_out_dir(sys.argv)
    import importlib.metadata

    sys.exit(run_maker(out_dir, "deepspeed", importlib.metadata.version("deepspeed"), CASES))
