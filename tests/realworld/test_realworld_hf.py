"""Verdicts on real HF training states (Trainer, accelerate, PEFT).

The states come from tests/fixture_makers/realworld_hf_maker.py (real libraries, planted faults
made the way they happen); tests/realworld_check.py scores ckpt_explorer against their truth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from realworld_check import (
    assert_read_as_planned,
    assert_resume_holds,
    assert_state_holds,
    check_state,
)

MAKER = "realworld_hf"

STATES = [
    "trainer_step2",
    "trainer_step4",
    "trainer_resume_clean",
    "trainer_resume_no_scheduler",
    "trainer_resume_no_optimizer_1step",
    "trainer_resume_no_optimizer_3step",
    "trainer_resume_param_order",
    "trainer_rng_deleted",
    "accelerate_step2",
    "accelerate_resume_clean",
    "accelerate_resume_scheduler_not_prepared",
    "accelerate_rng_deleted",
    "peft_manual_step3",
    "peft_manual_resume_clean",
    "peft_manual_resume_scheduler_not_loaded",
    "peft_trainer_step2",
]
RESUMES = [
    "trainer_resume_clean",
    "trainer_resume_no_scheduler",
    "trainer_resume_no_optimizer_1step",
    "trainer_resume_no_optimizer_3step",
    "trainer_resume_param_order",
    "trainer_rng_deleted",
    "accelerate_resume_clean",
    "accelerate_resume_scheduler_not_prepared",
    "accelerate_rng_deleted",
    "peft_manual_resume_clean",
    "peft_manual_resume_scheduler_not_loaded",
]


@pytest.fixture(scope="module")
def corpus_hf(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints(MAKER)
    return Path(root), manifest


def test_corpus_cases(corpus_hf: tuple[Path, dict[str, Any]]) -> None:
    """Every case listed here is made (and nothing else), with the contract's keys."""
    _, manifest = corpus_hf
    cases = manifest["cases"]
    assert sorted(cases) == sorted(STATES)
    assert sorted(c for c in cases if cases[c].get("resume_of")) == sorted(RESUMES)
    for cid, case in cases.items():
        assert case["setup"] and case["id_names"], cid
        assert case["expect"] == "clean" or case.get("resume_of"), cid
    expects = {c["expect"] for c in cases.values()}
    assert expects == {
        "clean",
        "scheduler_not_restored",
        "optimizer_moments_reset",
        "param_order_changed",
        "rng_state_missing",
    }


@pytest.mark.parametrize("case_id", STATES)
def test_state_is_read_as_a_training_state(
    corpus_hf: tuple[Path, dict[str, Any]], case_id: str
) -> None:
    """Trainer / accelerate folders and LoRA adapters saved with their optimizer are training
    states (the adapter folder's optimizer.pt, scheduler.pt and RNG are not ignored)."""
    root, manifest = corpus_hf
    assert_read_as_planned(root, manifest["cases"][case_id])


@pytest.mark.parametrize("case_id", STATES)
def test_state_verdicts(corpus_hf: tuple[Path, dict[str, Any]], case_id: str) -> None:
    """Clean: no error/warning finding; faulty: validate reports the fault; ids never named
    wrong (right, or honestly ambiguous/unknown)."""
    assert_state_holds(*corpus_hf, case_id)


@pytest.mark.parametrize("case_id", RESUMES)
def test_resume_verdicts(corpus_hf: tuple[Path, dict[str, Any]], case_id: str) -> None:
    """Faulty resumes: the planted cause ranks first; correct ones: no cause scores >= 0.5."""
    assert_resume_holds(*corpus_hf, case_id)


def test_trainer_names_known(corpus_hf: tuple[Path, dict[str, Any]]) -> None:
    """A clean Trainer checkpoint holds the model beside the optimizer: with per-group
    alignment every id's name is decidable, so none may stay unknown or ambiguous."""
    root, manifest = corpus_hf
    result = check_state(root, "trainer_step2", manifest["cases"]["trainer_step2"])
    assert result.crash is None, result.describe()
    counts = result.verdict_counts()
    assert counts["right"] == len(result.names) == 28, (counts, result.describe())
