"""Step counters weighed together: the part that disagrees with the others is the one named.

On real ColossalAI Booster states whose optimizer was not restored at the resume (tests/
fixture_makers/realworld_torch_maker.py), the optimizer's step is behind while the scheduler
and the run position agree: validate names the optimizer (an error with the fix), and does not
blame the scheduler that agrees with the run. Small torch loops check the other shapes: a
scheduler left behind by the run, a run position in micro-steps, an optimizer with no counter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from ckpt_explorer.validate import validate_checkpoint

LOUD = ("error", "warning")


def _loud(path: Path) -> list[tuple[str, str, str]]:
    report = validate_checkpoint(path, numeric=False)
    return [(f.rule, f.severity, f.message) for f in report.findings if f.severity in LOUD]


@pytest.mark.parametrize(
    "case_id",
    [
        "colossalai_meta_sharded_optimizer_not_loaded_1",
        "colossalai_meta_sharded_optimizer_not_loaded_3",
        "colossalai_meta_unsharded_optimizer_not_loaded_1",
        "colossalai_chat_optimizer_not_loaded_3",
    ],
)
def test_the_optimizer_left_behind_is_named(real_checkpoints: Any, case_id: str) -> None:
    root, manifest = real_checkpoints("realworld_torch")
    loud = _loud(Path(root) / manifest["cases"][case_id]["path"])
    rules = [r for r, _, _ in loud]
    assert rules == ["bundle.optimizer_step"], loud
    _rule, severity, message = loud[0]
    assert severity == "error" and "not restored" in message and "agree" in message
    assert "scheduler.optimizer_step" not in rules  # the scheduler agrees with the run


def _loop(steps: int, opt_name: str = "adamw") -> tuple[torch.nn.Module, Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    if opt_name == "sgd":
        opt: Any = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (1 + s))
    for _ in range(steps):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    return model, opt, sched


def test_a_scheduler_left_behind_by_the_run(tmp_path: Path) -> None:
    """Optimizer and run position at 7, the scheduler rebuilt at the resume (3 steps since)."""
    model, opt, _ = _loop(7)
    _, _, behind = _loop(3)
    state = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": behind.state_dict(),
        "iter_num": 7,
    }
    torch.save(state, tmp_path / "ckpt.pt")
    steps = [(r, m) for r, _, m in _loud(tmp_path / "ckpt.pt") if r.endswith("_step")]
    assert [r for r, _ in steps] == ["scheduler.optimizer_step"], steps
    assert "agrees with the optimizer" in steps[0][1]


def test_sgd_scheduler_against_the_run_position(tmp_path: Path) -> None:
    """SGD keeps no step counter: the scheduler is weighed against the run position alone, and
    validate says that a restart of SGD itself cannot be seen in one state."""
    model, opt, _ = _loop(7, "sgd")
    _, _, behind = _loop(3, "sgd")
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "scheduler": behind.state_dict(),
            "iter_num": 7,
        },
        tmp_path / "ckpt.pt",
    )
    report = validate_checkpoint(tmp_path / "ckpt.pt", numeric=False)
    (f,) = [f for f in report.findings if f.rule == "bundle.scheduler_step"]
    assert f.severity == "warning" and "no step counter" in f.message and "7" in f.message
    assert [f.severity for f in report.findings if f.rule == "optimizer.restart_unknown"] == [
        "info"
    ]


def test_a_run_position_in_micro_steps_is_explained_only_when_recorded(tmp_path: Path) -> None:
    """Optimizer and scheduler agree (3) but the run position says 12: with the factor
    recorded, gradient accumulation (info); without it and no writer profile to say what
    ``step`` counts, 'cannot tell' (info, not a warning: a false alarm costs more)."""
    model, opt, sched = _loop(3)
    base = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "step": 12,
    }
    torch.save({**base, "grad_accum_steps": 4}, tmp_path / "with.pt")
    torch.save(base, tmp_path / "without.pt")
    assert not _loud(tmp_path / "with.pt")
    assert not _loud(tmp_path / "without.pt")
    report = validate_checkpoint(tmp_path / "without.pt", numeric=False)
    said = [f for f in report.findings if f.rule == "bundle.optimizer_step"]
    assert [f.severity for f in said] == ["info"], said
    assert "agrees with the optimizer" in said[0].message  # optimizer and scheduler agree: 3
    assert "cannot tell" in said[0].message


def test_megatron_optimizer_and_scheduler_both_left_behind(
    real_checkpoints: Any, tmp_path: Path
) -> None:
    """Megatron-LM's --no-load-optim restores neither the optimizer nor its scheduler: both
    count the 3 steps since the resume while ``iteration`` is 7. With fp16 off no step can be
    skipped, so both were left unrestored (an error); with fp16 on, the gap could be skipped
    loss-scale steps, and validate says it may be either (a warning)."""
    import shutil

    root, manifest = real_checkpoints("realworld_megatron")
    case = Path(root) / manifest["cases"]["legacy_tp2_optimizer_not_loaded_3"]["path"]
    loud = _loud(case)
    assert [(r, s) for r, s, _ in loud] == [("bundle.optimizer_step", "error")], loud
    assert "both behind the run position 7" in loud[0][2] and "restored neither" in loud[0][2]

    copy = tmp_path / case.name
    shutil.copytree(case, copy)
    for rank_file in sorted(copy.glob("mp_rank_*/model_optim_rng.pt")):
        state = torch.load(rank_file, weights_only=False)  # written by this test's maker
        state["args"].fp16, state["args"].bf16 = True, False
        torch.save(state, rank_file)
    loud = _loud(copy)
    assert [(r, s) for r, s, _ in loud] == [("bundle.optimizer_step", "warning")], loud
    assert "skipped fp16 steps" in next(
        f.hint
        for f in validate_checkpoint(copy, numeric=False).findings
        if f.rule == "bundle.optimizer_step"
    )
