"""Real torchtune training states (tests/fixture_makers/realworld_tune_maker.py): the full and
the LoRA single-device recipes of torchtune 0.6.1 with FullModelHFCheckpointer.

What holds today: the manifest holds the planned cases with their truth, and the files load
with the real clients: transformers' ``from_pretrained`` for each ``epoch_N`` folder, PEFT's
``PeftModel.from_pretrained`` for the LoRA adapter, and ``torch.load(weights_only=True)`` for
``recipe_state.pt`` / ``adapter_model.pt`` as torchtune's ``safe_torch_load`` reads them.
ckpt_explorer's verdicts are expected to fail until it reads torchtune folders.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from realworld_check import (
    assert_cases_as_planned,
    assert_read_as_planned,
    assert_resume_holds,
    assert_state_holds,
    resumed_ids,
)
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).parent.parent / "fixture_makers"))
from realworld_tune_maker import BASE_EPOCHS, planned_cases

MAKER = "realworld_tune"
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
        assert (root / case["path"] / "recipe_state" / "recipe_state.pt").is_file(), cid
        assert case["id_names"] and all(case["id_names"].values()), cid
        assert all(case["hf_names"].values()), cid
        assert case["recipe_state_keys"] == [
            "dataloader",
            "epochs_run",
            "max_steps_per_epoch",
            "optimizer",
            "seed",
            "total_epochs",
        ]
    assert cases["full_base"]["epochs_run"] == BASE_EPOCHS
    assert cases["full_resume_clean"]["epochs_run"] == BASE_EPOCHS + 1
    assert cases["full_optimizer_not_loaded"]["epochs_run"] == 1


@pytest.mark.parametrize("case_id", STATES)
def test_state_loads_with_the_real_clients(
    corpus: tuple[Path, dict[str, Any]], case_id: str
) -> None:
    from transformers import LlamaForCausalLM

    root, manifest = corpus
    case = manifest["cases"][case_id]
    run = root / case["path"]
    state = torch.load(run / "recipe_state" / "recipe_state.pt", weights_only=True)
    assert state["epochs_run"] == case["epochs_run"]
    ids = {str(i) for g in state["optimizer"]["param_groups"] for i in g["params"]}
    assert ids == set(case["id_names"]["recipe_state/recipe_state.pt"])
    epoch = run / case["latest_epoch_dir"]
    saved = load_file(epoch / "model-00001-of-00001.safetensors")
    if not case_id.startswith("lora"):
        model = LlamaForCausalLM.from_pretrained(epoch)
        for name, t in model.state_dict().items():
            assert torch.equal(t, saved[name]), name
        return
    # transformers 5's from_pretrained takes a folder with adapter_config.json for a PEFT
    # adapter (and wants peft >= 0.18 for it): the merged weights go in through the config
    from peft import PeftModel
    from transformers import LlamaConfig

    model = LlamaForCausalLM(LlamaConfig.from_pretrained(epoch))
    model.load_state_dict(saved, strict=True)
    adapter = torch.load(epoch / "adapter_model.pt", weights_only=True)
    # the recipe hands all model params to AdamW (the frozen base ones stay in its groups, with
    # no state): the ids with state are the adapter's
    names = case["id_names"]["recipe_state/recipe_state.pt"]
    assert {names[str(i)] for i in state["optimizer"]["state"]} == set(adapter)
    peft = PeftModel.from_pretrained(
        LlamaForCausalLM.from_pretrained(root / "inputs" / "base_hf"), epoch
    )
    lora = {n.replace(".default.", ".") for n, _ in peft.named_parameters() if "lora_" in n}
    assert lora == {case["hf_names"][k] for k in adapter}


@pytest.mark.parametrize("case_id", STATES)
def test_state_is_read_as_a_training_state(
    corpus: tuple[Path, dict[str, Any]], case_id: str
) -> None:
    root, manifest = corpus
    assert_read_as_planned(root, manifest["cases"][case_id])


@pytest.mark.parametrize("case_id", STATES)
def test_state_verdicts(corpus: tuple[Path, dict[str, Any]], case_id: str) -> None:
    assert_state_holds(*corpus, case_id)


@pytest.mark.parametrize("case_id", RESUMES)
def test_resume_verdicts(corpus: tuple[Path, dict[str, Any]], case_id: str) -> None:
    assert_resume_holds(*corpus, case_id)
