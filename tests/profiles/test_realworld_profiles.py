"""Writer profiles on real states: HF Trainer with several ``optim=`` values, mmengine's Runner,
Lightning's ModelCheckpoint (tests/fixture_makers/realworld_profiles_maker.py).

Each state gets its writer's profile (with evidence); clean states get no error or warning;
each planted fault (a lost ``scheduler.pt`` that the old rule explained as gradient
accumulation, an optimizer copied from another save, an mmengine resume that skipped the
scheduler or the optimizer, a stale ``last_checkpoint`` pointer, a stale ``last.ckpt``) is
found by a warning or error that names it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from profiles_check import score

from ckpt_explorer import open_checkpoint
from ckpt_explorer.validate.parts import collect

MAKER = "realworld_profiles"
CLEAN = [
    "hf_adamw_torch_step4",
    "hf_adafactor_step4",
    "mmengine_iter4",
    "mmengine_iter8",
    "mmengine_resume_clean",
    "lightning_accum_step4",
    "lightning_accum_last",
]
FAULTS = {
    "hf_resume_scheduler_lost": "bundle.optimizer_step",
    "hf_optimizer_from_other_save": "bundle.optimizer_step",
    "mmengine_resume_no_scheduler": "bundle.scheduler_step",
    "mmengine_resume_no_optimizer": "bundle.optimizer_step",
    "mmengine_stale_pointer": "bundle.stale_pointer",
    "lightning_stale_last": "bundle.stale_copy",
}


@pytest.fixture(scope="module")
def corpus(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints(MAKER)
    return Path(root), manifest


def test_each_state_gets_its_writer_profile(corpus: tuple[Path, dict[str, Any]]) -> None:
    root, manifest = corpus
    for case_id, case in manifest["cases"].items():
        match = collect(open_checkpoint(root / case["path"])).writer
        assert match.profile.name == case["profile"], (case_id, match.describe())
        assert match.reasons, case_id


@pytest.mark.parametrize("case_id", CLEAN)
def test_clean_states_get_no_warning(corpus: tuple[Path, dict[str, Any]], case_id: str) -> None:
    root, manifest = corpus
    result = score(root, manifest["cases"][case_id])
    assert not result["false"], result["loud"]


def test_bitsandbytes_optims_clean_where_they_ran(corpus: tuple[Path, dict[str, Any]]) -> None:
    """8-bit / paged / Lion optimizers of bitsandbytes: every one that ran on this machine's
    CPU is clean; those that could not run are recorded with the reason."""
    root, manifest = corpus
    cases = manifest["cases"]
    skipped = next(iter(cases.values())).get("skipped_optims", {})
    ran = [c for c in cases if c.startswith("hf_") and c.endswith("_step4")]
    for optim in ("adamw_bnb_8bit", "paged_adamw_8bit", "lion_8bit"):
        assert f"hf_{optim}_step4" in ran or optim in skipped, optim
    for case_id in ran:
        result = score(root, cases[case_id])
        assert not result["false"], (case_id, result["loud"])


@pytest.mark.parametrize("case_id", sorted(FAULTS))
def test_planted_faults_are_found(corpus: tuple[Path, dict[str, Any]], case_id: str) -> None:
    root, manifest = corpus
    result = score(root, manifest["cases"][case_id])
    assert result["found"], result["loud"]
    assert FAULTS[case_id] in {rule for rule, _, _ in result["loud"]}, result["loud"]


def test_trainer_global_step_is_not_explained_as_accumulation(
    corpus: tuple[Path, dict[str, Any]],
) -> None:
    """The Trainer resumed without ``scheduler.pt`` restores neither part: optimizer and
    scheduler count 2 steps at ``global_step`` 4 with ``gradient_accumulation_steps=2``. The
    Trainer's ``global_step`` counts optimizer steps, so this is an error naming both, not
    "4 = 2 × 2, gradient accumulation"."""
    root, manifest = corpus
    result = score(root, manifest["cases"]["hf_resume_scheduler_lost"])
    errors = [m for r, s, m in result["loud"] if r == "bundle.optimizer_step" and s == "error"]
    assert errors and "restored neither" in errors[0], result["loud"]
