"""Truthful verdicts on real training states: plain-PyTorch loops and ColossalAI.

The states are written by ``fixture_makers/realworld_torch_maker.py`` with the real tools (a
nanoGPT-style loop saved as one file or as separate files + meta.pt, torch.compile / DDP
prefixes, ColossalAI Booster + TorchDDPPlugin in the ``global_stepN`` + meta.pt and ColossalChat
layouts); the maker records what is true of each (``expect``, ``resume_of``, ``id_names``) and
``realworld_check`` scores ckpt_explorer's verdicts against it:

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
    check_state,
    resumed_ids,
    state_problems,
)

sys.path.insert(0, str(Path(__file__).parent.parent / "fixture_makers"))
from realworld_torch_maker import planned_cases

MAKER = "realworld_torch"
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
        if case.get("resume_of"):
            assert cases[case["resume_of"]]["expect"] == "clean", cid
    # the planted faults are made as the contract says: 1 and 3+ steps after the resume
    for cid in ("nanogpt_files_optimizer_not_loaded_1", "nanogpt_files_optimizer_not_loaded_3"):
        assert (root / cases[cid]["path"] / "optimizer.pt").is_file()
    assert not (root / cases["nanogpt_files_rng_missing"]["path"] / "meta.pt").exists()
    assert (root / cases["nanogpt_files_resume_clean"]["path"] / "meta.pt").is_file()


@pytest.mark.parametrize("case_id", STATES)
def test_state_is_read_as_a_training_state(real_checkpoints: Any, case_id: str) -> None:
    """A one-file {'model', 'optimizer', 'scheduler', 'iter_num'} save and every folder are
    training states (not a model) in the family the maker names."""
    root, manifest = _corpus(real_checkpoints)
    assert_read_as_planned(root, manifest["cases"][case_id])


@pytest.mark.parametrize("case_id", STATES)
def test_state_verdicts(real_checkpoints: Any, case_id: str) -> None:
    """Clean: no error/warning, ids named right or honestly ambiguous. Faulty: validate sees it.

    A state marked ``shape_visible: false`` (the optimizer rebuilt with same-shaped params
    swapped, its old state loaded by position) cannot show the fault in its own files, and its
    names cannot be told from the aligned ones; only the pair (the doctor) is asserted for it.
    """
    root, manifest = _corpus(real_checkpoints)
    case = manifest["cases"][case_id]
    result = check_state(root, case_id, case)
    if case.get("shape_visible") is False:
        assert result.crash is None, result.describe()
        assert not result.errors, result.describe()
        return
    problems = state_problems(result)
    assert not problems, "\n".join([result.describe(), *problems])


@pytest.mark.parametrize("case_id", CLEAN)
def test_clean_state_names_are_all_decided(real_checkpoints: Any, case_id: str) -> None:
    """The model lies beside the optimizer and its groups follow the model's order, so one
    assignment of parameters to ids fits: every id is named, and named right."""
    root, manifest = _corpus(real_checkpoints)
    result = check_state(root, case_id, manifest["cases"][case_id])
    assert result.crash is None, result.describe()
    counts = result.verdict_counts()
    assert result.names and counts["right"] == len(result.names), (dict(counts), result.describe())


@pytest.mark.parametrize("case_id", RESUMES)
def test_resume_verdicts(real_checkpoints: Any, case_id: str) -> None:
    """The doctor on (resume_of, case): the planted cause first; no false cause >= 0.5."""
    assert_resume_holds(*_corpus(real_checkpoints), case_id)
