"""SequentialLR, ChainedScheduler and CosineAnnealingWarmRestarts in real torch loops: clean
saves (one file, separate files, DCP) and a clean resume give no finding; a resume that
rebuilds the scheduler without loading it is found by the doctor and the timeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.optim import lr_scheduler as L

from ckpt_explorer import open_checkpoint, resume_doctor
from ckpt_explorer.timeline import build_timeline
from ckpt_explorer.validate import validate_checkpoint

STEPS = 4  # optimizer steps between saves


def _scheduler(kind: str, opt: torch.optim.Optimizer) -> Any:
    if kind == "seq":
        warm = L.LinearLR(opt, start_factor=0.1, end_factor=1.0, total_iters=3)
        return L.SequentialLR(opt, [warm, L.CosineAnnealingLR(opt, T_max=20)], milestones=[3])
    if kind == "chain":
        return L.ChainedScheduler([L.ConstantLR(opt, 0.5, 4), L.ExponentialLR(opt, 0.9)])
    return L.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2)


def _fresh(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def _train(model: nn.Module, opt: torch.optim.Optimizer, sched: Any, n: int) -> None:
    for _ in range(n):
        loss = model(torch.randn(5, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def _state(model: nn.Module, opt: torch.optim.Optimizer, sched: Any, step: int) -> dict[str, Any]:
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "step": step,
    }


def _run(root: Path, kind: str, bad: bool) -> Path:
    """Saves at steps 4 and 8 (one file; separate files at 8), resumes from step 8 (scheduler
    loaded, or rebuilt and not loaded when ``bad``) and saves at 12. Returns the run folder."""
    run = root / f"{kind}-{'bad' if bad else 'clean'}"
    run.mkdir(parents=True)
    model, opt = _fresh()
    sched = _scheduler(kind, opt)
    for step in (STEPS, 2 * STEPS):
        _train(model, opt, sched, STEPS)
        torch.save(_state(model, opt, sched, step), run / f"ckpt_{step}.pt")
    sep = root / f"{kind}-{'bad' if bad else 'clean'}-sep"
    sep.mkdir()
    torch.save(model.state_dict(), sep / "model.pt")
    torch.save(opt.state_dict(), sep / "optimizer.pt")
    torch.save(sched.state_dict(), sep / "scheduler.pt")
    torch.save({"rng_state": torch.get_rng_state(), "step": 2 * STEPS}, sep / "rng_state.pt")
    # resume in a new "process": everything rebuilt from the file
    saved = torch.load(run / f"ckpt_{2 * STEPS}.pt", weights_only=True)
    model, opt = _fresh(seed=1)
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["optimizer"])
    if bad:
        for g in opt.param_groups:
            g["lr"] = g["initial_lr"]  # the config's peak lr, as a rebuilt run starts
    sched = _scheduler(kind, opt)
    if not bad:
        sched.load_state_dict(saved["scheduler"])
    _train(model, opt, sched, STEPS)
    torch.save(_state(model, opt, sched, 3 * STEPS), run / f"ckpt_{3 * STEPS}.pt")
    return run


def _loud(path: Path) -> list[str]:
    report = validate_checkpoint(path, numeric=False)
    return [f"{f.rule}: {f.message}" for f in report.findings if f.severity in ("error", "warning")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], Path]:
    root = tmp_path_factory.mktemp("sched")
    return {(k, bad): _run(root, k, bad) for k in ("seq", "chain", "warm") for bad in (False, True)}


@pytest.mark.parametrize("kind", ["seq", "chain", "warm"])
def test_clean_saves_have_no_finding(runs: dict[tuple[str, bool], Path], kind: str) -> None:
    run = runs[(kind, False)]
    for step in (STEPS, 2 * STEPS, 3 * STEPS):
        assert _loud(run / f"ckpt_{step}.pt") == [], step
    assert _loud(run.parent / f"{run.name}-sep") == []


@pytest.mark.parametrize("kind", ["seq", "chain", "warm"])
def test_clean_resume_has_no_strong_cause(runs: dict[tuple[str, bool], Path], kind: str) -> None:
    run = runs[(kind, False)]
    report = resume_doctor(run / f"ckpt_{2 * STEPS}.pt", run / f"ckpt_{3 * STEPS}.pt")
    assert report.facts["scheduler steps"] == (2 * STEPS, 3 * STEPS)
    assert [c.cause for c in report.causes if c.score >= 0.5] == []
    timeline = build_timeline(run, cache_dir=run.parent / f"cache-{kind}")
    assert [a.kind for a in timeline.anomalies if a.severity in ("error", "warning")] == []


@pytest.mark.parametrize("kind", ["seq", "chain"])
def test_scheduler_rebuilt_not_loaded_is_found(
    runs: dict[tuple[str, bool], Path], kind: str
) -> None:
    run = runs[(kind, True)]
    after = run / f"ckpt_{3 * STEPS}.pt"
    report = resume_doctor(run / f"ckpt_{2 * STEPS}.pt", after)
    assert report.top is not None and report.top.cause == "scheduler_not_restored"
    assert report.facts["scheduler steps"] == (2 * STEPS, STEPS)
    timeline = build_timeline(run, cache_dir=run.parent / f"cache-bad-{kind}")
    assert [(a.step, a.kind) for a in timeline.anomalies if a.severity == "error"] == [
        (3 * STEPS, "lr_restart")
    ]
    assert any(f.startswith("scheduler.optimizer_step") for f in _loud(after))


def test_chained_scheduler_file_is_a_scheduler(runs: dict[tuple[str, bool], Path]) -> None:
    view = open_checkpoint(runs[("chain", False)].parent / "chain-clean-sep" / "scheduler.pt")
    assert view.kind == "scheduler"


def test_warm_restarts_stepped_by_fractional_epoch(tmp_path: Path) -> None:
    """``step(epoch + i / iters)`` (torch's documented use): last_epoch counts epochs, so the
    scheduler's step against the optimizer's is unknown, not a finding."""
    model, opt = _fresh()
    sched = _scheduler("warm", opt)
    iters = 4
    for epoch in range(3):
        for i in range(iters):
            loss = model(torch.randn(5, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step(epoch + i / iters)
    torch.save(_state(model, opt, sched, 3 * iters), tmp_path / "ckpt.pt")
    assert _loud(tmp_path / "ckpt.pt") == []


def _dcp_run(root: Path, kind: str) -> Path:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, opt = _fresh()
    sched = _scheduler(kind, opt)
    for step in (STEPS, 2 * STEPS):
        _train(model, opt, sched, STEPS)
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd, "scheduler": sched.state_dict(), "step": step}
        dcp.save(state, checkpoint_id=str(root / kind / f"step_{step}"))
    return root / kind


@pytest.mark.parametrize("kind", ["seq", "chain"])
def test_dcp_composite_scheduler_is_one_scheduler(tmp_path: Path, kind: str) -> None:
    run = _dcp_run(tmp_path, kind)
    for step in (STEPS, 2 * STEPS):
        assert _loud(run / f"step_{step}") == [], step
    report = resume_doctor(run / f"step_{STEPS}", run / f"step_{2 * STEPS}")
    assert report.facts["scheduler steps"] == (STEPS, 2 * STEPS)
    assert [c.cause for c in report.causes if c.score >= 0.5] == []
