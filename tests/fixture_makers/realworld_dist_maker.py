"""Real-world training states, DeepSpeed ZeRO and torch DCP side.

Usage: ``python tests/fixture_makers/realworld_dist_maker.py OUT_DIR``

Every state is written by a tiny training run the way training code writes it; the corpus
contract (``setup``, ``expect``, ``resume_of``, ``id_names``) is in
tests/realworld_check.py. The model is a tiny language model (``embed``, ``blocks.N.norm`` /
``fc`` / ``proj``, ``norm_f``, ``head``); the optimizer is torch AdamW with the usual
weight-decay / no-decay groups split by ``p.ndim`` (which interleaves the model order).
``id_names`` comes from the live objects: the module's parameter names walked in the groups'
order, numbered as ``torch.optim.Optimizer.state_dict`` numbers them.

Setups (each: a base state after 4 steps, then states saved after resuming from it):

* ``deepspeed_zero2``: ZeRO-2 on CPU (DS_ACCELERATOR=cpu, gloo world of 1), the client AdamW
  (zero_allow_untested_optimizer), a torch warm-up + cosine ``LambdaLR`` passed to
  ``deepspeed.initialize``; ``engine.save_checkpoint(dir)`` -> ``dir/{latest,
  global_stepN/{mp_rank_00_model_states.pt, zero_pp_rank_0_mp_rank_00_optim_states.pt}}``.
* ``deepspeed_zero3``: ZeRO-3, DeepSpeed's own ``WarmupDecayLR`` built from the config.
  Each DeepSpeed run (base or resume) is a child process. DeepSpeed's shared-memory all-reduce
  kernel build is stubbed out (it plays no part in the files; see deepspeed_maker.py).
* ``dcp_torchtitan``: torchtitan style, no process group: ``msd, osd = get_state_dict(model,
  optimizer)``; ``dcp.save({"model": msd, "optim": osd, "lr_scheduler": sched.state_dict(),
  "step": n}, checkpoint_id="step-N")``; resume: ``dcp.load`` into a fresh run's state dicts,
  then ``set_state_dict`` / ``sched.load_state_dict``.

Planted faults, made the way they happen on resume: the scheduler not restored (DeepSpeed
``load_checkpoint(..., load_lr_scheduler_states=False)``; DCP: ``lr_scheduler`` not loaded);
the optimizer not restored (DeepSpeed ``load_optimizer_states=False``; DCP: the model and the
step only), saved 1 and 3 steps after the resume.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from _manifest import cpu_rank_env, fresh_dir, main_out_dir, run_child, run_maker
from _models import TinyLM, decay_groups, id_names, token_batch, warmup_cosine

CHILD_FLAG = "--dist-child"
SEED = 1234
VOCAB, DIM, N_LAYER, SEQ, BATCH = 32, 16, 2, 8, 4
BASE_STEPS = 4
LR, WARMUP, TOTAL = 1e-3, 2, 20

# (variant, expect, steps after the resume, load optimizer, load scheduler)
Variant = tuple[str, str, int, bool, bool]
RESUME_CLEAN: Variant = ("resume_clean", "clean", 3, True, True)
SCHED_NOT_LOADED: Variant = ("scheduler_not_loaded", "scheduler_not_restored", 3, True, False)
OPTIM_NOT_LOADED_1: Variant = ("optimizer_not_loaded_1", "optimizer_moments_reset", 1, False, True)
OPTIM_NOT_LOADED_3: Variant = ("optimizer_not_loaded_3", "optimizer_moments_reset", 3, False, True)
VARIANTS = (RESUME_CLEAN, SCHED_NOT_LOADED, OPTIM_NOT_LOADED_1, OPTIM_NOT_LOADED_3)

# setup key -> (setup label, ZeRO stage or 0 for DCP)
PLAN: dict[str, tuple[str, int]] = {
    "deepspeed_zero2": ("DeepSpeed ZeRO-2 save_checkpoint (torch LambdaLR)", 2),
    "deepspeed_zero3": ("DeepSpeed ZeRO-3 save_checkpoint (WarmupDecayLR)", 3),
    "dcp_torchtitan": ("torch DCP get_state_dict, torchtitan style", 0),
}


# ----------------------------------------------------------------------------------------------
# The model (_models.TinyLM), its schedule and its data
# ----------------------------------------------------------------------------------------------


def lr_factor(step: int) -> float:
    """Linear warm-up, then cosine decay to 10 %, as a LambdaLR factor."""
    return warmup_cosine(step, WARMUP, TOTAL)


def batch(step: int) -> torch.Tensor:
    """The batch of a global step (a data loader that resumes at the right sample)."""
    return token_batch(step, SEED, VOCAB, BATCH, SEQ)


# ----------------------------------------------------------------------------------------------
# DeepSpeed: one child process per run
# ----------------------------------------------------------------------------------------------


def _ds_child(stage: int, variant: str, load_dir: str, save_dir: str, result: str) -> None:
    if os.environ.get("DS_MAKER_BUILD_SHM") != "1":
        import deepspeed.comm.torch

        sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    v = next((x for x in VARIANTS if x[0] == variant), None)
    torch.manual_seed(SEED)
    model = TinyLM(VOCAB, DIM, N_LAYER)
    groups = decay_groups(model)
    truth = id_names(model.named_parameters(), groups)
    optimizer = torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.95))
    scheduler = None
    config: dict[str, Any] = {
        "train_batch_size": BATCH,
        "train_micro_batch_size_per_gpu": BATCH,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1000,
    }
    if stage == 2:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    else:
        config["scheduler"] = {
            "type": "WarmupDecayLR",
            "params": {
                "warmup_min_lr": 0.0,
                "warmup_max_lr": LR,
                "warmup_num_steps": WARMUP,
                "total_num_steps": TOTAL,
            },
        }
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=config, lr_scheduler=scheduler
    )
    steps = BASE_STEPS
    if v is not None:
        _, _, steps, load_opt, load_sched = v
        path, _ = engine.load_checkpoint(
            load_dir,
            load_optimizer_states=load_opt,
            load_lr_scheduler_states=load_sched,
        )
        if path is None:
            raise RuntimeError(f"load_checkpoint found nothing in {load_dir}")
        # the fault is real: the flat partitions' AdamW step after the load
        state = engine.optimizer.optimizer.state
        loaded = max((float(st.get("step", 0)) for st in state.values()), default=0.0)
        if (loaded == BASE_STEPS) != load_opt:
            raise AssertionError(f"{variant}: optimizer step {loaded} after load_checkpoint")
    for _ in range(steps):
        loss = engine(batch(engine.global_steps))
        engine.backward(loss)
        engine.step()
    engine.save_checkpoint(save_dir)
    tag = (Path(save_dir) / "latest").read_text().strip()
    optim = sorted(Path(save_dir, tag).glob("*optim_states.pt"))
    if len(optim) != 1:
        raise AssertionError(f"expected one optim_states file, found {optim}")
    model_file = next(Path(save_dir, tag).glob("*model_states.pt"))
    saved = torch.load(model_file, map_location="cpu", weights_only=False)
    # DeepSpeed's own record of the groups: param_shapes lists the names group by group
    recorded = [n for g in saved["param_shapes"] for n in g]
    if recorded != [truth[str(i)] for i in range(len(truth))]:
        raise AssertionError(f"param_shapes order {recorded} != truth {truth}")
    if saved["global_steps"] != engine.global_steps:
        raise AssertionError(f"global_steps {saved['global_steps']} != {engine.global_steps}")
    out = {
        "truth": truth,
        "optim": optim[0].relative_to(save_dir).as_posix(),
        "global_steps": engine.global_steps,
        "lr": [g["lr"] for g in engine.optimizer.param_groups],
    }
    Path(result).write_text(json.dumps(out))


def _run_ds(stage: int, variant: str, load_dir: Path | None, save_dir: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            CHILD_FLAG,
            str(stage),
            variant,
            str(load_dir or ""),
            str(save_dir),
            str(result),
        ]
        run_child(cmd, cpu_rank_env(), f"DeepSpeed ZeRO-{stage} {variant}", result, tail=4000)
        return dict(json.loads(result.read_text()))


def deepspeed_setup(out: Path, key: str) -> dict[str, Any]:
    label, stage = PLAN[key]
    root = fresh_dir(out / key)
    cases: dict[str, Any] = {}

    def record(case_id: str, path: Path, res: Mapping[str, Any], expect: str, **kw: Any) -> None:
        cases[case_id] = {
            "path": path.relative_to(out).as_posix(),
            "family": "deepspeed",
            "kind": "training_state",
            "setup": label,
            "expect": expect,
            "id_names": {res["optim"]: res["truth"]},
            "global_steps": res["global_steps"],
            **kw,
        }

    base_id = f"{key}_base"
    base = root / "base"
    record(base_id, base, _run_ds(stage, "base", None, base), "clean")
    jobs = int(os.environ.get("DS_MAKER_JOBS", "2"))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures: dict[Variant, Future[dict[str, Any]]] = {
            v: pool.submit(_run_ds, stage, v[0], base, root / v[0]) for v in VARIANTS
        }
        results = {v: fut.result() for v, fut in futures.items()}
    for v, res in results.items():
        record(f"{key}_{v[0]}", root / v[0], res, v[1], resume_of=base_id)
    # the fault is real: the scheduler left at its start gives another learning rate
    if results[SCHED_NOT_LOADED]["lr"] == results[RESUME_CLEAN]["lr"]:
        raise AssertionError(f"{key}: the scheduler fault did not change the learning rate")
    return cases


# ----------------------------------------------------------------------------------------------
# torch DCP, torchtitan style (no process group)
# ----------------------------------------------------------------------------------------------


class DcpRun:
    def __init__(self) -> None:
        torch.manual_seed(SEED)
        self.model = TinyLM(VOCAB, DIM, N_LAYER)
        self.optimizer = torch.optim.AdamW(decay_groups(self.model), lr=LR, betas=(0.9, 0.95))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_factor)
        self.step = 0

    def train(self, steps: int) -> None:
        for _ in range(steps):
            loss = self.model(batch(self.step))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad()
            self.step += 1

    def state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no process group: get_state_dict warns, works
            msd, osd = get_state_dict(self.model, self.optimizer)
        return {
            "model": msd,
            "optim": osd,
            "lr_scheduler": self.scheduler.state_dict(),
            "step": self.step,
        }

    def save(self, folder: Path) -> Path:
        import torch.distributed.checkpoint as dcp

        path = folder / f"step-{self.step}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no process group: DCP warns, works
            dcp.save(self.state(), checkpoint_id=str(path))
        return path

    def resume(self, path: Path, load_opt: bool, load_sched: bool) -> None:
        """torchtitan's load: the keys to restore, filled in place by ``dcp.load``."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

        full = self.state()
        wanted = ["model", "step"] + (["optim"] if load_opt else [])
        wanted += ["lr_scheduler"] if load_sched else []
        state = {k: full[k] for k in wanted}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no process group: DCP warns, works
            dcp.load(state, checkpoint_id=str(path))
            if load_opt:
                set_state_dict(
                    self.model,
                    self.optimizer,
                    model_state_dict=state["model"],
                    optim_state_dict=state["optim"],
                )
            else:  # the fault: the model only (its optimizer keeps the fresh state)
                set_model_state_dict(self.model, state["model"])
        if load_sched:
            self.scheduler.load_state_dict(state["lr_scheduler"])
        self.step = int(state["step"])


def dcp_setup(out: Path, key: str) -> dict[str, Any]:
    label, _ = PLAN[key]
    root = fresh_dir(out / key)
    cases: dict[str, Any] = {}

    def record(case_id: str, run: DcpRun, folder: Path, expect: str, **kw: Any) -> Path:
        path = run.save(folder)
        truth = id_names(run.model.named_parameters(), run.optimizer.param_groups)
        own = run.optimizer.state_dict()
        for sid, st in own["state"].items():
            want = dict(run.model.named_parameters())[truth[str(sid)]].shape
            if st["exp_avg"].shape != want:
                raise AssertionError(f"state {sid}: {st['exp_avg'].shape} != {want}")
        cases[case_id] = {
            "path": path.relative_to(out).as_posix(),
            "family": "torch-dcp",
            "kind": "training_state",
            "setup": label,
            "expect": expect,
            "id_names": {"": truth},
            "global_steps": run.step,
            **kw,
        }
        return path

    base = DcpRun()
    base.train(BASE_STEPS)
    base_id = f"{key}_base"
    base_path = record(base_id, base, root / "base", "clean")
    for name, expect, steps, load_opt, load_sched in VARIANTS:
        run = DcpRun()
        run.resume(base_path, load_opt, load_sched)
        if load_opt and not torch.equal(
            run.optimizer.state_dict()["state"][0]["exp_avg"],
            base.optimizer.state_dict()["state"][0]["exp_avg"],
        ):
            raise AssertionError("DCP resume did not restore the optimizer")
        run.train(steps)
        record(f"{key}_{name}", run, root / name, expect, resume_of=base_id)
    return cases


# ----------------------------------------------------------------------------------------------


def planned_cases() -> dict[str, dict[str, Any]]:
    """Case id -> {"setup", "expect", "resume_of"?}: what a run of this maker writes."""
    plan: dict[str, dict[str, Any]] = {}
    for key, (label, _) in PLAN.items():
        plan[f"{key}_base"] = {"setup": label, "expect": "clean"}
        for v in VARIANTS:
            plan[f"{key}_{v[0]}"] = {"setup": label, "expect": v[1], "resume_of": f"{key}_base"}
    return plan


def _case(key: str) -> Callable[[Path], Mapping[str, Any]]:
    def make(out: Path) -> dict[str, Any]:
        return dcp_setup(out, key) if PLAN[key][1] == 0 else deepspeed_setup(out, key)

    return make


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {key: _case(key) for key in PLAN}


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] == CHILD_FLAG:
        stage, variant, load_dir, save_dir, result = argv[2:7]
        _ds_child(int(stage), variant, load_dir, save_dir, result)
        return 0
    from importlib.metadata import version as dist_version

    version = f"torch {torch.__version__}, deepspeed {dist_version('deepspeed')}"
    return run_maker(main_out_dir(argv), "realworld_dist", version, CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
