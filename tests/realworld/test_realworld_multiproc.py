"""Verdicts on training states written by 2 processes (accelerate ``save_state`` under torchrun).

The states come from tests/fixture_makers/realworld_multiproc_maker.py; accelerate steps a
prepared scheduler once per process, so a clean state's scheduler count is 2 × the optimizer
step, which the files show by their two ``random_states_<rank>.pkl``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from realworld_check import check_resume, check_state, resume_problems, state_problems

from ckpt_explorer import open_checkpoint, validate_checkpoint
from ckpt_explorer.timeline import build_timeline

MAKER = "realworld_multiproc"
STATES = ["accelerate2_step3", "accelerate2_step6", "accelerate2_resume_clean"]


@pytest.fixture(scope="module")
def corpus(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints(MAKER)
    return Path(root), manifest


@pytest.mark.parametrize("case_id", STATES)
def test_state_verdicts(corpus: tuple[Path, dict[str, Any]], case_id: str) -> None:
    """No error or warning; the 2 × stepping is said as info, with both counts."""
    root, manifest = corpus
    case = manifest["cases"][case_id]
    assert case["scheduler_last_epoch"] == 2 * case["optimizer_step"]  # what accelerate did
    view = open_checkpoint(root / case["path"])
    assert (view.family, view.kind) == (case["family"], case["kind"])
    result = check_state(root, case_id, case)
    problems = state_problems(result)
    assert not problems, "\n".join([result.describe(), *problems])
    info = [f for f in result.findings if f.rule == "scheduler.per_process_steps"]
    assert len(info) == 1 and info[0].severity == "info", result.describe()
    assert f"{case['scheduler_last_epoch']} steps" in info[0].message


def test_resume_verdict(corpus: tuple[Path, dict[str, Any]]) -> None:
    """A clean load_state resume: no cause scores >= 0.5, no step mismatch between parts."""
    root, manifest = corpus
    result = check_resume(root, manifest, "accelerate2_resume_clean")
    problems = resume_problems(result)
    assert not problems, "\n".join([result.describe(), *problems])
    assert "step_mismatch_between_parts" not in dict(result.causes), result.describe()


def test_one_process_count_still_warns(corpus: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """Control: with one random_states file the files show one process, and a scheduler at
    2 × the optimizer step is the mismatch it is."""
    root, manifest = corpus
    state = shutil.copytree(root / manifest["cases"]["accelerate2_step6"]["path"], tmp_path / "s")
    (state / "random_states_1.pkl").unlink()
    findings = validate_checkpoint(open_checkpoint(state)).findings
    assert [f.severity for f in findings if f.rule == "scheduler.optimizer_step"] == ["warning"]
    assert not any(f.rule == "scheduler.per_process_steps" for f in findings)


def test_timeline_of_the_run(corpus: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    root, _ = corpus
    t = build_timeline(root / "run", cache_dir=tmp_path / "cache")
    assert [c.step for c in t.checkpoints] == [3, 6]
    loud = [(a.kind, a.message) for a in t.anomalies if a.severity in ("error", "warning")]
    assert not loud, loud
