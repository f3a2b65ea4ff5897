"""Real-world training states of a torch loop with SWA/EMA averaging and a GradScaler.

Usage: ``python tests/fixture_makers/realworld_swa_maker.py OUT_DIR``

The recipe of torch's SWA docs (``torch.optim.swa_utils``) with AdamW,
a main ``CosineAnnealingLR`` stepped once per epoch until ``swa_start``, then
``AveragedModel.update_parameters`` and ``SWALR.step()`` once per epoch; an EMA copy
(``AveragedModel(multi_avg_fn=get_ema_multi_avg_fn(0.9))``) updated every optimizer step; fp16
autocast with ``torch.amp.GradScaler("cpu")``. One ``torch.save`` per epoch,
``ckpt_epoch<E>.pt``: ``model``, ``swa_model`` and ``ema_model`` (``module.*`` plus
``n_averaged``), ``optimizer``, ``scheduler``, ``swa_scheduler``, ``scaler``, ``epoch``.

Counters: the optimizer's ``step`` counts optimizer steps (``STEPS`` per epoch); the main
scheduler's ``last_epoch`` counts epochs up to ``swa_start + 1``; the SWA scheduler's and
``swa_model.n_averaged`` count epochs after ``swa_start``; ``ema_model.n_averaged`` counts
optimizer steps.

Cases (the corpus contract is in tests/realworld_check.py):

* ``swa_epoch1`` (before SWA starts) / ``swa_epoch3`` / ``swa_epoch5``: one run, clean.
* ``swa_resume_clean``: resumed from ``ckpt_epoch1.pt`` with every part loaded; epoch 5.
* ``swa_main_scheduler_not_restored``: the resume loads everything but the main ``scheduler``
  (the SWA scheduler is loaded): it restarts its cosine while the run goes on; epoch 3.
* ``swa_optimizer_not_restored``: the resume loads the models, schedulers and scaler but not
  the optimizer; epoch 5.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from _manifest import main_out_dir, run_maker
from _models import id_names
from torch import nn

SETUP = "torch SWA + EMA (swa_utils AveragedModel, SWALR, GradScaler)"
EPOCHS, STEPS, SWA_START = 6, 3, 2


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(6, 12),
        nn.BatchNorm1d(12),
        nn.ReLU(),
        nn.Linear(12, 12),
        nn.ReLU(),
        nn.Linear(12, 2),
    )


def _batch(epoch: int, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(10 * epoch + i)
    return torch.randn(8, 6, generator=g), torch.randint(0, 2, (8,), generator=g)


def train(
    folder: Path, resume: Path | None = None, skip: tuple[str, ...] = (), until: int = EPOCHS
) -> tuple[nn.Module, torch.optim.Optimizer]:
    from torch.optim.swa_utils import SWALR, AveragedModel, get_ema_multi_avg_fn

    folder.mkdir(parents=True, exist_ok=True)
    model = _model()
    swa_model = AveragedModel(model)
    ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=EPOCHS)
    swa_sched = SWALR(opt, swa_lr=5e-3, anneal_epochs=2)
    scaler = torch.amp.GradScaler("cpu")
    parts = {
        "model": model,
        "swa_model": swa_model,
        "ema_model": ema_model,
        "optimizer": opt,
        "scheduler": sched,
        "swa_scheduler": swa_sched,
        "scaler": scaler,
    }
    start = 0
    if resume is not None:
        state = torch.load(resume, map_location="cpu", weights_only=True)
        for key, obj in parts.items():
            if key not in skip:
                obj.load_state_dict(state[key])
        start = state["epoch"] + 1
    for epoch in range(start, until):
        model.train()
        for i in range(STEPS):
            x, y = _batch(epoch, i)
            with torch.autocast("cpu", dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            ema_model.update_parameters(model)
        if epoch > SWA_START:
            swa_model.update_parameters(model)
            swa_sched.step()
        else:
            sched.step()
        state = {k: v.state_dict() for k, v in parts.items()}
        torch.save({**state, "epoch": epoch}, folder / f"ckpt_epoch{epoch}.pt")
    return model, opt


def _case(out: Path, path: Path, truth: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    osd = state["optimizer"]
    ids = {str(i) for g in osd["param_groups"] for i in g["params"]}
    if ids != set(truth):
        raise AssertionError(f"{path}: optimizer ids {sorted(ids)} != {sorted(truth)}")
    return {
        "path": path.relative_to(out).as_posix(),
        "family": "torch-zip",
        "kind": "training_state",
        "setup": SETUP,
        "expect": extra.pop("expect", "clean"),
        "id_names": {"optimizer": dict(truth)},
        "epoch": state["epoch"],
        "optimizer_step": sorted({float(s["step"]) for s in osd["state"].values()}),
        "scheduler_last_epoch": state["scheduler"]["last_epoch"],
        "swa_scheduler_last_epoch": state["swa_scheduler"]["last_epoch"],
        "swa_n_averaged": int(state["swa_model"]["n_averaged"]),
        "ema_n_averaged": int(state["ema_model"]["n_averaged"]),
        "keys": sorted(state),
        **extra,
    }


def swa_cases(out: Path) -> dict[str, Any]:
    warnings.filterwarnings("ignore")
    run = out / "run"
    model, opt = train(run)
    truth = id_names(model.named_parameters(), opt.param_groups)
    cases = {f"swa_epoch{e}": _case(out, run / f"ckpt_epoch{e}.pt", truth) for e in (1, 3, 5)}
    start = run / "ckpt_epoch1.pt"
    train(out / "resume_clean", start)
    cases["swa_resume_clean"] = _case(
        out, out / "resume_clean" / "ckpt_epoch5.pt", truth, resume_of="swa_epoch1"
    )
    train(out / "resume_no_scheduler", start, skip=("scheduler",), until=4)
    cases["swa_main_scheduler_not_restored"] = _case(
        out,
        out / "resume_no_scheduler" / "ckpt_epoch3.pt",
        truth,
        expect="scheduler_not_restored",
        resume_of="swa_epoch1",
    )
    train(out / "resume_no_optimizer", start, skip=("optimizer",))
    cases["swa_optimizer_not_restored"] = _case(
        out,
        out / "resume_no_optimizer" / "ckpt_epoch5.pt",
        truth,
        expect="optimizer_moments_reset",
        resume_of="swa_epoch1",
    )
    return cases


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {"swa": swa_cases}


def main(argv: list[str]) -> int:
    return run_maker(main_out_dir(argv), "realworld_swa", f"torch {torch.__version__}", CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
