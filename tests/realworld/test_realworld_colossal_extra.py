"""Real ColossalAI states the other makers do not cover
(tests/fixture_makers/realworld_colossal_extra_maker.py): ``booster.enable_lora`` +
``save_lora_as_pretrained`` under TorchDDPPlugin, and MoE pipeline shards
(``-stage-SSSSS-EEEEE-shard-NNNNN``).

What holds today: the manifest holds the planned cases with their truth, and the files load
with the real clients (PEFT's ``from_pretrained`` for the adapter, transformers'
``from_pretrained`` for the MoE shards through their index, ``torch.load`` for the optimizer
shards and group file). ckpt_explorer's verdicts are expected to fail until it reads these.
"""

from __future__ import annotations

import json
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
from realworld_colossal_extra_maker import LLAMA_KW, planned_cases

MAKER = "realworld_colossal_extra"
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
        assert case["id_names"] and all(case["id_names"]["optimizer"].values()), cid
        assert (root / case["path"] / "optimizer").is_dir(), cid
    moe = cases["moe_pp2_base"]
    assert moe["model_files"] == [
        "config.json",
        "generation_config.json",
        "pytorch_model-stage-00001-00001-shard-00001.bin",
        "pytorch_model-stage-00002-00001-shard-00001.bin",
        "pytorch_model.bin.index.json",
    ]
    assert "pytorch_optim_group.bin" in moe["optimizer_files"]


@pytest.mark.parametrize("case_id", sorted(c for c in PLAN if c.startswith("lora")))
def test_lora_state_loads_with_peft(corpus: tuple[Path, dict[str, Any]], case_id: str) -> None:
    from peft import PeftModel
    from transformers import LlamaConfig, LlamaForCausalLM

    root, manifest = corpus
    case = manifest["cases"][case_id]
    folder = root / case["path"]
    model = PeftModel.from_pretrained(
        LlamaForCausalLM(LlamaConfig(**LLAMA_KW)), folder / "modeling"
    )
    names = {n.replace(".default.", ".") for n, _ in model.named_parameters() if "lora_" in n}
    assert names == set(case["id_names"]["optimizer"].values())
    index = json.loads((folder / "optimizer" / "pytorch_optim.bin.index.json").read_text())
    groups = torch.load(
        folder / "optimizer" / index["metadata"]["param_groups"], weights_only=False
    )
    assert {str(i) for g in groups for i in g["params"]} == set(case["id_names"]["optimizer"])
    assert json.loads((folder / "running_states.json").read_text())["step"] == case["global_steps"]


def test_moe_shards_load_with_from_pretrained(corpus: tuple[Path, dict[str, Any]]) -> None:
    from transformers import MixtralForCausalLM

    root, manifest = corpus
    case = manifest["cases"]["moe_pp2_base"]
    folder = root / case["path"]
    # transformers 5 fuses Mixtral's experts on load: the loading info says nothing is missing
    _, info = MixtralForCausalLM.from_pretrained(folder / "modeling", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    index = json.loads((folder / "modeling" / "pytorch_model.bin.index.json").read_text())
    on_disk: set[str] = set()
    for shard in sorted(set(index["weight_map"].values())):
        on_disk |= set(torch.load(folder / "modeling" / shard, weights_only=True))
    assert on_disk == set(index["weight_map"])
    opt_index = json.loads((folder / "optimizer" / "pytorch_optim.bin.index.json").read_text())
    ids = set(opt_index["weight_map"])
    assert ids and ids <= set(case["id_names"]["optimizer"])


@pytest.mark.parametrize("case_id", STATES)
def test_state_verdicts(corpus: tuple[Path, dict[str, Any]], case_id: str) -> None:
    assert_state_holds(*corpus, case_id)


@pytest.mark.parametrize("case_id", RESUMES)
def test_resume_verdicts(corpus: tuple[Path, dict[str, Any]], case_id: str) -> None:
    assert_resume_holds(*corpus, case_id)
