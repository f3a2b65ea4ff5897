"""Verdicts on training states written by timm's train loop, detectron2's fvcore Checkpointer,
LitGPT's pretrain (Fabric), a torch SWA/EMA loop and a plain loop saving a tied-embedding LM
mid-epoch under gradient accumulation.

The states come from tests/fixture_makers/realworld_{timm,fvcore,litgpt,swa,tiedlm}_maker.py
(the real tools' own save and resume paths, faults planted as users make them);
tests/realworld_check.py scores ckpt_explorer against their truth: clean states get no error
or warning, every planted fault is found by validate, and no optimizer id is named wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from realworld_check import check_state, state_problems

from ckpt_explorer import open_checkpoint
from ckpt_explorer.profiles import detect_profile

# maker -> (its cases, the writer profile each case is detected as)
MAKERS = {
    "realworld_timm": (
        [
            *(f"timm_{m}_{c}" for m in ("vit", "resnet") for c in ("epoch1", "epoch3")),
            *(
                f"timm_{m}_{c}"
                for m in ("vit", "resnet")
                for c in ("resume_clean", "no_resume_opt")
            ),
            "timm_vit_stale_last",
        ],
        "timm",
    ),
    "realworld_fvcore": (
        [
            "fvcore_iter3",
            "fvcore_iter7",
            "fvcore_resume_clean",
            "fvcore_scheduler_not_restored",
            "fvcore_optimizer_not_restored",
            "fvcore_other_run_weights",
            "fvcore_stale_pointer",
        ],
        "fvcore",
    ),
    "realworld_litgpt": (
        ["litgpt_step2", "litgpt_step4", "litgpt_resume_clean", "litgpt_optimizer_not_restored"],
        "litgpt",
    ),
    "realworld_swa": (
        [
            "swa_epoch1",
            "swa_epoch3",
            "swa_epoch5",
            "swa_resume_clean",
            "swa_main_scheduler_not_restored",
            "swa_optimizer_not_restored",
        ],
        "torch-swa",
    ),
    "realworld_tiedlm": (
        [
            "tiedlm_micro12",
            "tiedlm_micro24",
            "tiedlm_resume_clean",
            "tiedlm_scheduler_not_restored",
            "tiedlm_optimizer_not_restored",
        ],
        "unknown",
    ),
}
CASES = [(maker, case) for maker, (cases, _) in MAKERS.items() for case in cases]


@pytest.fixture(scope="module")
def corpora(real_checkpoints: Any) -> Any:
    def get(maker: str) -> tuple[Path, dict[str, Any]]:
        root, manifest = real_checkpoints(maker)
        return Path(root), manifest

    return get


@pytest.mark.parametrize("maker", sorted(MAKERS))
def test_corpus_cases(corpora: Any, maker: str) -> None:
    _, manifest = corpora(maker)
    assert sorted(manifest["cases"]) == sorted(MAKERS[maker][0])


@pytest.mark.parametrize(("maker", "case_id"), CASES)
def test_state_verdicts(corpora: Any, maker: str, case_id: str) -> None:
    """Clean: no error or warning; faulty: a warning or error that reports the fault; every
    optimizer id named right."""
    root, manifest = corpora(maker)
    case = manifest["cases"][case_id]
    result = check_state(root, case_id, case)
    problems = state_problems(result)
    assert not problems, "\n".join([result.describe(), *problems])
    assert result.names and result.verdict_counts()["right"] == len(result.names)


@pytest.mark.parametrize(("maker", "case_id"), CASES)
def test_writer_profile(corpora: Any, maker: str, case_id: str) -> None:
    """Each state is told as its writer's (a plain loop as no writer), with evidence."""
    root, manifest = corpora(maker)
    view = open_checkpoint(root / manifest["cases"][case_id]["path"])
    found = detect_profile(view)
    assert found.profile.name == MAKERS[maker][1], found.describe()
    assert bool(found.reasons) == found.known


def test_litgpt_step_folder_opens(corpora: Any) -> None:
    """LitGPT's ``step-N/`` folder is a checkpoint: lit_model.pth's parts, named ids, the
    run's arguments."""
    root, manifest = corpora("realworld_litgpt")
    case = manifest["cases"]["litgpt_step4"]
    view = open_checkpoint(root / case["path"])
    assert (view.family, view.kind) == ("litgpt", "training_state")
    assert sorted(view.parts) == ["hyperparameters.yaml", "lit_model.pth"]
    inner = view.parts["lit_model.pth"]
    assert {p.kind for p in inner.parts.values()} >= {"model", "optimizer", "running_state"}
    assert view.values["lit_model.pth/step_count"] == case["step_count"] == 4
    assert view.values["hyperparameters.yaml/train.micro_batch_size"] == 2


def test_litgpt_accumulation_from_arguments(corpora: Any) -> None:
    """``iter_num`` counts micro-batches: with the factor LitGPT computes from the recorded
    arguments it is the optimizer step, so it agrees with ``step_count`` and the folder name."""
    root, manifest = corpora("realworld_litgpt")
    case = manifest["cases"]["litgpt_step4"]
    found = detect_profile(open_checkpoint(root / case["path"]))
    assert found.facts()["gradient_accumulation_iters"] == case["iter_num"] // case["step_count"]
    assert found.profile.unit("iter_num") == "micro_batches"
    assert found.profile.unit("step_count") == "optimizer_steps"
