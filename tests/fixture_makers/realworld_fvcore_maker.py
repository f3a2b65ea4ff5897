"""Real-world training states written by detectron2's checkpointer, fvcore's ``Checkpointer``.

Usage: ``python tests/fixture_makers/realworld_fvcore_maker.py OUT_DIR``

A small conv net (Conv / BatchNorm / ReLU / Linear) trained the way detectron2's
``tools/plain_train_net.py`` trains: ``Checkpointer(model, out, optimizer=, scheduler=)``,
``start_iter = checkpointer.resume_or_load(weights, resume=True).get("iteration", -1) + 1``,
then per iteration ``optimizer.step(); scheduler.step(); periodic_checkpointer.step(iteration)``
with ``PeriodicCheckpointer(period=4)``. Each ``model_000000N.pth`` holds ``model``,
``optimizer`` (AdamW), ``scheduler`` (a warm-up ``LambdaLR``) and ``iteration`` (the 0-based
index of the last iteration run: the run has taken ``iteration + 1`` optimizer steps); the
folder's ``last_checkpoint`` names the newest file.

Cases (the corpus contract is in tests/realworld_check.py):

* ``fvcore_iter3`` / ``fvcore_iter7``: one run's ``model_0000003.pth`` / ``model_0000007.pth``,
  clean.
* ``fvcore_resume_clean``: a second process resumes the run from its folder
  (``resume_or_load(resume=True)`` reads ``last_checkpoint``), saved at iteration 7.
* ``fvcore_scheduler_not_restored``: the scheduler is registered with the checkpointer only
  after ``resume_or_load`` (built after the load, as code that builds it from the resumed
  optimizer does): it restarts at step 0 while the optimizer and ``iteration`` go on.
* ``fvcore_optimizer_not_restored``: ``checkpointer.load(path, checkpointables=["scheduler"])``
  (a loop that restores the scheduler but not the optimizer): fresh AdamW moments.
* ``fvcore_other_run_weights``: a new output folder, ``MODEL.WEIGHTS`` pointing at the first
  run's file and ``resume=True``: with no ``last_checkpoint`` in the new folder fvcore loads
  only the model (``checkpointables=[]``) but returns the file's ``iteration``, so the loop
  starts at iteration 4 with a fresh optimizer and scheduler.
* ``fvcore_stale_pointer``: a copy of the run folder whose ``last_checkpoint`` still names
  iteration 3's file though iteration 7's is there (a pointer restored from an older copy):
  validate of ``model_0000007.pth`` there.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from _manifest import main_out_dir, run_maker
from _models import id_names
from torch import nn

SETUP = "detectron2 / fvcore Checkpointer + PeriodicCheckpointer"
PERIOD = 4


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 5),
    )


def _batch(iteration: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + iteration)
    return torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)


def _optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)


def _scheduler(opt: torch.optim.Optimizer) -> Any:
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda it: min(1.0, (it + 1) / 3))


def _train(
    folder: Path,
    max_iter: int,
    weights: str = "",
    *,
    resume: bool = True,
    late_scheduler: bool = False,
    only: list[str] | None = None,
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """detectron2's ``do_train`` with fvcore's checkpointers (plus the planted mistakes)."""
    from fvcore.common.checkpoint import Checkpointer, PeriodicCheckpointer

    folder.mkdir(parents=True, exist_ok=True)
    model = _model()
    opt = _optimizer(model)
    sched = _scheduler(opt)
    if late_scheduler:
        checkpointer = Checkpointer(model, str(folder), optimizer=opt)
    else:
        checkpointer = Checkpointer(model, str(folder), optimizer=opt, scheduler=sched)
    if only is not None:  # a loop that restores some parts only
        extra = checkpointer.load(checkpointer.get_checkpoint_file(), checkpointables=only)
    else:
        extra = checkpointer.resume_or_load(weights, resume=resume)
    start_iter = extra.get("iteration", -1) + 1
    if late_scheduler:
        sched = _scheduler(opt)  # rebuilt from the resumed optimizer, then registered
        checkpointer.add_checkpointable("scheduler", sched)
    periodic = PeriodicCheckpointer(checkpointer, PERIOD, max_iter=None)
    model.train()
    for iteration in range(start_iter, max_iter):
        x, y = _batch(iteration)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        periodic.step(iteration)
    return model, opt


def _case(out: Path, path: Path, truth: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    state = torch.load(path, map_location="cpu", weights_only=False)  # our own file
    osd = state["optimizer"]
    ids = {str(i) for g in osd["param_groups"] for i in g["params"]}
    if ids != set(truth):
        raise AssertionError(f"{path}: optimizer ids {sorted(ids)} != {sorted(truth)}")
    steps = {float(s["step"]) for s in osd["state"].values()}
    return {
        "path": path.relative_to(out).as_posix(),
        "family": "torch-zip",
        "kind": "training_state",
        "setup": SETUP,
        "expect": extra.pop("expect", "clean"),
        "id_names": {"": dict(truth)},
        "iteration": state["iteration"],
        "optimizer_step": sorted(steps),
        "scheduler_last_epoch": state["scheduler"]["last_epoch"],
        "keys": sorted(state),
        **extra,
    }


def fvcore_cases(out: Path) -> dict[str, Any]:
    run = out / "run"
    model, opt = _train(run, 8)
    truth = id_names(model.named_parameters(), opt.param_groups)
    cases = {f"fvcore_iter{it}": _case(out, run / f"model_{it:07d}.pth", truth) for it in (3, 7)}

    def resumed(name: str, **kw: Any) -> Path:
        folder = out / name
        folder.mkdir()
        shutil.copy2(run / "model_0000003.pth", folder / "model_0000003.pth")
        (folder / "last_checkpoint").write_text("model_0000003.pth")
        _train(folder, 8, **kw)
        return folder / "model_0000007.pth"

    cases["fvcore_resume_clean"] = _case(
        out, resumed("resume_clean"), truth, resume_of="fvcore_iter3"
    )
    cases["fvcore_scheduler_not_restored"] = _case(
        out,
        resumed("resume_late_scheduler", late_scheduler=True),
        truth,
        expect="scheduler_not_restored",
        resume_of="fvcore_iter3",
    )
    cases["fvcore_optimizer_not_restored"] = _case(
        out,
        resumed("resume_no_optimizer", only=["scheduler"]),
        truth,
        expect="optimizer_moments_reset",
        resume_of="fvcore_iter3",
    )
    other = out / "other_run"
    _train(other, 8, str(run / "model_0000003.pth"), resume=True)
    cases["fvcore_other_run_weights"] = _case(
        out,
        other / "model_0000007.pth",
        truth,
        expect="optimizer_moments_reset",
        also=["scheduler_not_restored"],
        resume_of="fvcore_iter3",
    )
    stale = out / "stale_pointer"
    shutil.copytree(run, stale)
    (stale / "last_checkpoint").write_text("model_0000003.pth")
    cases["fvcore_stale_pointer"] = _case(
        out, stale / "model_0000007.pth", truth, expect="stale_pointer", pointer="last_checkpoint"
    )
    for case in cases.values():
        case["run_folder"] = "run"
    return cases


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {"fvcore": fvcore_cases}


def main(argv: list[str]) -> int:
    import fvcore

    version = f"torch {torch.__version__}, fvcore {getattr(fvcore, '__version__', '?')}"
    return run_maker(main_out_dir(argv), "realworld_fvcore", version, CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
