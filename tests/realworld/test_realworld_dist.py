"""Truthful verdicts on real training states: DeepSpeed ZeRO-2 / ZeRO-3 and torch DCP.

The states are written by ``fixture_makers/realworld_dist_maker.py`` with the real tools
(``engine.save_checkpoint`` under ZeRO-2 with a torch LambdaLR and ZeRO-3 with DeepSpeed's
WarmupDecayLR; torchtitan-style ``dcp.save`` of ``get_state_dict``); the maker records what is
true of each (``expect``, ``resume_of``, ``id_names``) and ``realworld_check`` scores
ckpt_explorer's verdicts against it:

* a clean state: no error or warning finding, every optimizer id named right or honestly
  ambiguous / unknown;
* a faulty state: ``validate`` reports the planted fault;
* a state saved after a resume: the doctor ranks the planted cause first, and a correct resume
  gets no cause scoring 0.5 or more.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from realworld_check import (
    assert_cases_as_planned,
    assert_read_as_planned,
    assert_resume_holds,
    assert_state_holds,
    check_state,
    resumed_ids,
)

sys.path.insert(0, str(Path(__file__).parent.parent / "fixture_makers"))
from realworld_dist_maker import BASE_STEPS, planned_cases

MAKER = "realworld_dist"
PLAN = planned_cases()
STATES = sorted(PLAN)
RESUMES = resumed_ids(PLAN)
CLEAN = sorted(cid for cid, c in PLAN.items() if c["expect"] == "clean")


def _corpus(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints(MAKER)
    return root, manifest


def test_manifest_holds_the_planned_cases_with_their_truth(real_checkpoints: Any) -> None:
    root, manifest = _corpus(real_checkpoints)
    cases = manifest["cases"]
    assert_cases_as_planned(cases, PLAN)
    for cid, case in cases.items():
        assert case["kind"] == "training_state", cid
        assert case["id_names"] and all(case["id_names"].values()), cid
        for loc in case["id_names"]:
            assert (root / case["path"] / loc).exists(), (cid, loc)
        if case.get("resume_of"):
            assert cases[case["resume_of"]]["expect"] == "clean", cid
    # the planted faults are made as the contract says: 1 and 3+ steps after the resume
    for key in ("deepspeed_zero2", "deepspeed_zero3", "dcp_torchtitan"):
        assert cases[f"{key}_base"]["global_steps"] == BASE_STEPS
        assert cases[f"{key}_optimizer_not_loaded_1"]["global_steps"] == BASE_STEPS + 1
        assert cases[f"{key}_optimizer_not_loaded_3"]["global_steps"] == BASE_STEPS + 3
        latest = root / cases[f"{key}_resume_clean"]["path"] / "latest"
        assert latest.is_file() == key.startswith("deepspeed"), key


@pytest.mark.parametrize("case_id", STATES)
def test_state_is_read_as_a_training_state(real_checkpoints: Any, case_id: str) -> None:
    """A ``save_checkpoint`` folder and a DCP folder are training states in their family."""
    root, manifest = _corpus(real_checkpoints)
    assert_read_as_planned(root, manifest["cases"][case_id])


@pytest.mark.parametrize("case_id", STATES)
def test_state_verdicts(real_checkpoints: Any, case_id: str) -> None:
    """Clean: no error/warning, ids named right or honestly ambiguous. Faulty: validate sees it."""
    assert_state_holds(*_corpus(real_checkpoints), case_id)


@pytest.mark.parametrize("case_id", CLEAN)
def test_clean_state_names_are_all_decided(real_checkpoints: Any, case_id: str) -> None:
    """Both formats record the parameter of each optimizer id (DeepSpeed's ``param_shapes``,
    DCP's FQN-keyed optimizer): every id is named, and named right."""
    root, manifest = _corpus(real_checkpoints)
    result = check_state(root, case_id, manifest["cases"][case_id])
    assert result.crash is None, result.describe()
    counts = result.verdict_counts()
    assert result.names and counts["right"] == len(result.names), (dict(counts), result.describe())


@pytest.mark.parametrize("case_id", RESUMES)
def test_resume_verdicts(real_checkpoints: Any, case_id: str) -> None:
    """The doctor on (resume_of, case): the planted cause first; no false cause >= 0.5."""
    assert_resume_holds(*_corpus(real_checkpoints), case_id)
