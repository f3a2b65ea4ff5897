"""Real training states with other optimizers and with two optimizers in one state
(tests/fixture_makers/realworld_optim_maker.py).

The manifest holds the planned cases with their truth, and every file loads back into the
real optimizers it came from (``load_state_dict`` of a freshly built run). ckpt_explorer's
verdicts (tests/realworld_check.py) hold on every case: clean states without false findings,
every planted fault reported by validate (or, where one state cannot show it — SGD keeps no
step counter — said to be undecidable) and ranked first by the doctor, no id named wrong.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from realworld_check import (
    assert_cases_as_planned,
    assert_resume_holds,
    assert_state_holds,
    resumed_ids,
)

sys.path.insert(0, str(Path(__file__).parent.parent / "fixture_makers"))
from realworld_optim_maker import BASE_STEPS, RESUME_STEPS, Run, planned_cases
from realworld_optim_maker import PLAN as SETUPS

MAKER = "realworld_optim"
PLAN = planned_cases()
STATES = sorted(PLAN)
RESUMES = resumed_ids(PLAN)


@pytest.fixture(scope="module")
def corpus(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints(MAKER)
    return Path(root), manifest


def test_manifest_holds_the_planned_cases_with_their_truth(
    corpus: tuple[Path, dict[str, Any]],
) -> None:
    root, manifest = corpus
    cases = manifest["cases"]
    assert_cases_as_planned(cases, PLAN)
    for cid, case in cases.items():
        assert (root / case["path"]).is_file(), cid
        assert case["id_names"] and all(case["id_names"].values()), cid
        steps = BASE_STEPS + (RESUME_STEPS if case.get("resume_of") else 0)
        assert case["iter_num"] == steps, cid
        if case["expect"] == "scheduler_not_restored":
            assert case["scheduler_last_epoch"] == [RESUME_STEPS] * len(case["id_names"]), cid
    assert cases["sgd_momentum_base"]["optimizer_step"] == [None]  # SGD keeps no step
    fresh = cases["schedulefree_optimizer_not_loaded"]["schedulefree_k"]
    assert fresh == RESUME_STEPS < cases["schedulefree_resume_clean"]["schedulefree_k"]


@pytest.mark.parametrize("case_id", STATES)
def test_state_loads_into_the_real_optimizers(
    corpus: tuple[Path, dict[str, Any]], case_id: str
) -> None:
    root, manifest = corpus
    case = manifest["cases"][case_id]
    key = next(k for k in SETUPS if case_id.startswith(k + "_"))
    state = torch.load(root / case["path"], map_location="cpu", weights_only=False)
    two = SETUPS[key][1] == 2
    assert set(state) == (
        {"model", "optimizers", "schedulers", "step"}
        if two
        else {"model", "optimizer", "iter_num", "config"}
        | ({"scheduler"} if key != "schedulefree" else set())
    )
    run = Run(key)
    if key == "adamw_add_group":
        run.add_head_group(resuming=True)
    run.model.load_state_dict(state["model"])
    osds = state["optimizers"] if two else [state["optimizer"]]
    for i, (opt, osd) in enumerate(zip(run.opts, osds, strict=True)):
        opt.load_state_dict(osd)
        loc = f"optimizers.{i}" if two else ""
        assert {str(pid) for pid in osd["state"]} <= set(case["id_names"][loc]), (case_id, loc)


@pytest.mark.parametrize("case_id", STATES)
def test_state_verdicts(corpus: tuple[Path, dict[str, Any]], case_id: str) -> None:
    assert_state_holds(*corpus, case_id)


@pytest.mark.parametrize("case_id", RESUMES)
def test_resume_verdicts(corpus: tuple[Path, dict[str, Any]], case_id: str) -> None:
    assert_resume_holds(*corpus, case_id)
