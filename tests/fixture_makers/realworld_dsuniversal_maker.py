"""Real-world training states, DeepSpeed universal checkpoints.

Usage: ``python tests/fixture_makers/realworld_dsuniversal_maker.py OUT_DIR``

Every state is written by a tiny training run with the real DeepSpeed on CPU
(``DS_ACCELERATOR=cpu``, gloo world of 1, the client torch AdamW with weight-decay / no-decay
groups split by ``p.ndim``, a warm-up + cosine ``LambdaLR`` passed to ``deepspeed.initialize``),
then converted by DeepSpeed's own ``ds_to_universal`` (``deepspeed.checkpoint.ds_to_universal``,
the module the ``ds_to_universal.py`` script runs, called with its own argument parser:
``--input_folder run/global_step4 --output_folder run/global_step4_universal
--inject_missing_state``; without ``--inject_missing_state`` it asks for the
``universal_checkpoint_info`` client state that Megatron-DeepSpeed writes). The corpus contract
(``setup``, ``expect``, ``resume_of``, ``id_names``) is in tests/realworld_check.py.

Setups (ZeRO-1 / ZeRO-2, bf16 and fp32): a base run of 4 steps, ``engine.save_checkpoint(run)``
-> ``run/{latest, global_step4/...}``, then ``ds_to_universal`` -> ``run/{latest_universal,
global_step4_universal/{mp_rank_00_model_states.pt, zero/<param>/{fp32,exp_avg,exp_avg_sq,
step}.pt}}``. Cases per setup: ``<key>_base`` (the ZeRO checkpoint folder ``run``) and
``<key>_universal`` (the universal folder). For each ZeRO checkpoint the fp32 masters that
DeepSpeed's own ``zero_to_fp32`` gives (``convert_zero_checkpoint_to_fp32_state_dict``) are
written to ``zero_to_fp32/<key>/model.safetensors`` (``zero_to_fp32`` in the case); the maker
asserts that the universal ``fp32.pt`` tensors equal them bit for bit.

Resumes, for ``zero2_bf16`` and ``zero1_fp32``: a fresh engine with ``"checkpoint":
{"load_universal": true}`` and ``engine.load_checkpoint(run)`` (which reads
``latest_universal``), 3 more steps, ``save_checkpoint``. Planted faults, made the way they
happen: the scheduler not loaded (``load_lr_scheduler_states=False``) and the optimizer not
loaded. A universal load restores the optimizer whatever ``load_optimizer_states`` /
``load_module_only`` say, so the weights-only resume is the one users make from the ZeRO
checkpoint: ``load_module_only=True`` without ``load_universal`` (DeepSpeed rebuilds its fp32
masters from the weights, the moments start at zero; ``global_steps`` and the scheduler start
over too: ``also`` scheduler_not_restored, ``"shape_visible": false``). Each is saved 3 steps
after the resume.

All DeepSpeed work runs in one child process (one ``import deepspeed``); DeepSpeed's
shared-memory all-reduce kernel build is stubbed out as in realworld_dist_maker.py (it plays no
part in the files).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from _manifest import cpu_rank_env, fresh_dir, main_out_dir, run_child, run_maker, tensor_entry
from _models import TinyLM, decay_groups, id_names, token_batch, warmup_cosine

CHILD_FLAG = "--dsuniversal-child"
SEED = 1234
VOCAB, DIM, N_LAYER, SEQ, BATCH = 32, 16, 2, 8, 4
BASE_STEPS, RESUME_STEPS = 4, 3
LR, WARMUP, TOTAL = 1e-3, 2, 20

# setup key -> (label, ZeRO stage, bf16)
PLAN: dict[str, tuple[str, int, bool]] = {
    "zero1_bf16": ("DeepSpeed ZeRO-1 bf16 -> ds_to_universal", 1, True),
    "zero2_bf16": ("DeepSpeed ZeRO-2 bf16 -> ds_to_universal", 2, True),
    "zero1_fp32": ("DeepSpeed ZeRO-1 fp32 -> ds_to_universal", 1, False),
    "zero2_fp32": ("DeepSpeed ZeRO-2 fp32 -> ds_to_universal", 2, False),
}
RESUMED = ("zero2_bf16", "zero1_fp32")
# (variant, expect, load optimizer, load scheduler)
VARIANTS: tuple[tuple[str, str, bool, bool], ...] = (
    ("resume_clean", "clean", True, True),
    ("scheduler_not_loaded", "scheduler_not_restored", True, False),
    ("optimizer_not_loaded", "optimizer_moments_reset", False, True),
)


# ----------------------------------------------------------------------------------------------
# The model (_models.TinyLM), its schedule and its data
# ----------------------------------------------------------------------------------------------


def lr_factor(step: int) -> float:
    return warmup_cosine(step, WARMUP, TOTAL)


def batch(step: int) -> torch.Tensor:
    return token_batch(step, SEED, VOCAB, BATCH, SEQ)


# ----------------------------------------------------------------------------------------------
# The child: every DeepSpeed run, conversion and zero_to_fp32, one deepspeed import
# ----------------------------------------------------------------------------------------------


def _engine(key: str, universal: bool) -> tuple[Any, dict[str, str]]:
    import deepspeed

    _, stage, bf16 = PLAN[key]
    torch.manual_seed(SEED)
    model = TinyLM(VOCAB, DIM, N_LAYER)
    groups = decay_groups(model)
    truth = id_names(model.named_parameters(), groups)
    optimizer = torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    config: dict[str, Any] = {
        "train_batch_size": BATCH,
        "train_micro_batch_size_per_gpu": BATCH,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,
        "bf16": {"enabled": bf16},
        "steps_per_print": 1000,
    }
    if universal:
        config["checkpoint"] = {"load_universal": True}
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=config, lr_scheduler=scheduler
    )
    return engine, truth


def _train(engine: Any, steps: int) -> None:
    for _ in range(steps):
        loss = engine(batch(engine.global_steps))
        engine.backward(loss)
        engine.step()


def _optimizer_step(engine: Any) -> float:
    state = engine.optimizer.optimizer.state
    return max((float(st.get("step", 0)) for st in state.values()), default=0.0)


def _record(engine: Any, save_dir: Path, truth: Mapping[str, str]) -> dict[str, Any]:
    tag = (save_dir / "latest").read_text().strip()
    optim = sorted((save_dir / tag).glob("*optim_states.pt"))
    if len(optim) != 1:
        raise AssertionError(f"expected one optim_states file, found {optim}")
    model_file = next((save_dir / tag).glob("*model_states.pt"))
    saved = torch.load(model_file, map_location="cpu", weights_only=False)
    recorded = [n for g in saved["param_shapes"] for n in g]
    if recorded != [truth[str(i)] for i in range(len(truth))]:
        raise AssertionError(f"param_shapes order {recorded} != truth {truth}")
    return {
        "truth": dict(truth),
        "optim": optim[0].relative_to(save_dir).as_posix(),
        "tag": tag,
        "global_steps": engine.global_steps,
        "optimizer_step": _optimizer_step(engine),
        "lr": [g["lr"] for g in engine.optimizer.param_groups],
        "scheduler_last_epoch": engine.lr_scheduler.last_epoch,
    }


def _to_universal(save_dir: Path, tag: str) -> Path:
    """DeepSpeed's ds_to_universal, with its own argument parser, as its script runs it."""
    from deepspeed.checkpoint import ds_to_universal

    out = save_dir / f"{tag}_universal"
    argv = sys.argv
    sys.argv = [
        "ds_to_universal.py",
        *("--input_folder", str(save_dir / tag), "--output_folder", str(out)),
        *("--num_extract_workers", "1", "--num_merge_workers", "1", "--inject_missing_state"),
    ]
    try:
        ds_to_universal.main(ds_to_universal.parse_arguments())
    finally:
        sys.argv = argv
    if (save_dir / "latest_universal").read_text().strip() != out.name:
        raise AssertionError("ds_to_universal did not write latest_universal")
    return out


def _zero_to_fp32(save_dir: Path, dst: Path, universal: Path) -> dict[str, Any]:
    """DeepSpeed's own zero_to_fp32 of the ZeRO checkpoint; universal fp32.pt must equal it."""
    from deepspeed.utils.zero_to_fp32 import convert_zero_checkpoint_to_fp32_state_dict
    from safetensors.torch import load_file

    convert_zero_checkpoint_to_fp32_state_dict(str(save_dir), str(dst), safe_serialization=True)
    masters = load_file(dst / "model.safetensors")
    for name, t in masters.items():
        fp32 = torch.load(universal / "zero" / name / "fp32.pt", weights_only=False)["param"]
        if fp32.dtype != t.dtype or not torch.equal(fp32, t):
            raise AssertionError(f"universal fp32.pt of {name} differs from zero_to_fp32")
    return {n: tensor_entry(t) for n, t in masters.items()}


def _universal_truth(universal: Path) -> dict[str, Any]:
    """What the universal folder holds per parameter, read back with torch.load."""
    out: dict[str, Any] = {}
    for folder in sorted(p for p in (universal / "zero").iterdir() if p.is_dir()):
        entry: dict[str, Any] = {}
        for f in sorted(folder.glob("*.pt")):
            obj = torch.load(f, weights_only=False)
            if isinstance(obj, torch.Tensor):
                entry[f.stem] = {"tensor": tensor_entry(obj), "value": float(obj)}
            else:
                entry[f.stem] = {
                    "keys": sorted(obj),
                    "tensor": tensor_entry(obj["param"]),
                    "cat_dim": obj.get("cat_dim"),
                }
        out[folder.name] = entry
    return out


def _child(out_dir: str, result: str) -> None:
    import deepspeed
    import deepspeed.comm.torch

    if os.environ.get("DS_MAKER_BUILD_SHM") != "1":
        sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]
    deepspeed.init_distributed(dist_backend="gloo")
    out = Path(out_dir)
    results: dict[str, Any] = {}
    for key in PLAN:
        root = fresh_dir(out / key)
        engine, truth = _engine(key, universal=False)
        _train(engine, BASE_STEPS)
        run = root / "run"
        engine.save_checkpoint(str(run))
        res = _record(engine, run, truth)
        universal = _to_universal(run, res["tag"])
        res["universal"] = universal.relative_to(out).as_posix()
        res["universal_params"] = _universal_truth(universal)
        dst = out / "zero_to_fp32" / key
        res["zero_to_fp32"] = {
            "path": (dst / "model.safetensors").relative_to(out).as_posix(),
            "tensors": _zero_to_fp32(run, dst, universal),
        }
        results[key] = {"base": res}
        del engine
    for key in RESUMED:
        base_step = results[key]["base"]["optimizer_step"]
        for name, _, load_opt, load_sched in VARIANTS:
            # a universal load always restores the optimizer (load_module_only is ignored):
            # the weights-only resume is load_module_only from the ZeRO checkpoint
            engine, truth = _engine(key, universal=load_opt)
            path, _ = engine.load_checkpoint(
                str(out / key / "run"),
                load_lr_scheduler_states=load_sched,
                load_module_only=not load_opt,
            )
            if path is None or Path(path).parent.name.endswith("_universal") != load_opt:
                raise RuntimeError(f"load_checkpoint loaded {path}")
            loaded = _optimizer_step(engine)
            if (loaded == base_step) != load_opt:
                raise AssertionError(f"{key} {name}: optimizer step {loaded} after the load")
            if engine.global_steps != (BASE_STEPS if load_opt else 0):
                raise AssertionError(f"{key} {name}: global_steps {engine.global_steps}")
            _train(engine, RESUME_STEPS)
            save = out / key / name
            engine.save_checkpoint(str(save))
            results[key][name] = _record(engine, save, truth)
            del engine
        clean, faulty = results[key]["resume_clean"], results[key]["scheduler_not_loaded"]
        if clean["lr"] == faulty["lr"]:
            raise AssertionError(f"{key}: the scheduler fault did not change the learning rate")
    Path(result).write_text(json.dumps(results, allow_nan=False))


def _run_child(out: Path) -> dict[str, Any]:
    result = out / ".dsuniversal-result.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), CHILD_FLAG, str(out), str(result)]
    run_child(cmd, cpu_rank_env(), "DeepSpeed child", result)
    data = dict(json.loads(result.read_text()))
    result.unlink()
    return data


def _cases(out: Path) -> dict[str, Any]:
    results = _run_child(out)
    cases: dict[str, Any] = {}
    for key, (label, stage, bf16) in PLAN.items():
        base = results[key]["base"]
        common = {"zero_stage": stage, "bf16": bf16}
        run = f"{key}/run"
        cases[f"{key}_base"] = {
            "path": run,
            "family": "deepspeed",
            "kind": "training_state",
            "setup": label,
            "expect": "clean",
            "id_names": {f"{base['tag']}/{Path(base['optim']).name}": base["truth"]},
            "global_steps": base["global_steps"],
            "optimizer_step": base["optimizer_step"],
            "zero_to_fp32": base["zero_to_fp32"],
            **common,
        }
        cases[f"{key}_universal"] = {
            "path": base["universal"],
            "family": "deepspeed-universal",
            "kind": "training_state",
            "setup": label,
            "expect": "clean",
            "id_names": {},
            "param_names": sorted(base["universal_params"]),
            "universal_params": base["universal_params"],
            "global_steps": base["global_steps"],
            "zero_to_fp32": base["zero_to_fp32"],
            "converted_from": f"{key}_base",
            **common,
        }
        for name, expect, load_opt, _ in VARIANTS if key in RESUMED else ():
            res = results[key][name]
            # load_module_only restores the weights only: global_steps and the scheduler start
            # over too, and the saved state is a plausible fresh run of 3 steps
            extra = {} if load_opt else {"also": ["scheduler_not_restored"], "shape_visible": False}
            cases[f"{key}_{name}"] = {
                "path": f"{key}/{name}",
                "family": "deepspeed",
                "kind": "training_state",
                "setup": label + ", resumed from the universal checkpoint",
                "expect": expect,
                "resume_of": f"{key}_base",
                "resumed_from_path": base["universal"],
                "id_names": {res["optim"]: res["truth"]},
                "global_steps": res["global_steps"],
                "optimizer_step": res["optimizer_step"],
                "scheduler_last_epoch": res["scheduler_last_epoch"],
                **extra,
                **common,
            }
    return cases


def planned_cases() -> dict[str, dict[str, Any]]:
    """Case id -> {"setup", "expect", "resume_of"?}: what a run of this maker writes."""
    plan: dict[str, dict[str, Any]] = {}
    for key, (label, _, _) in PLAN.items():
        plan[f"{key}_base"] = {"setup": label, "expect": "clean"}
        plan[f"{key}_universal"] = {"setup": label, "expect": "clean"}
        if key in RESUMED:
            for name, expect, _, _ in VARIANTS:
                plan[f"{key}_{name}"] = {
                    "setup": label + ", resumed from the universal checkpoint",
                    "expect": expect,
                    "resume_of": f"{key}_base",
                }
    return plan


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {"deepspeed_universal": _cases}


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] == CHILD_FLAG:
        _child(argv[2], argv[3])
        return 0
    from importlib.metadata import version as dist_version

    version = f"torch {torch.__version__}, deepspeed {dist_version('deepspeed')}"
    return run_maker(main_out_dir(argv), "realworld_dsuniversal", version, CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
