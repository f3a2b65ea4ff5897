"""Real Megatron training states: megatron-core dist_checkpointing and the Megatron-LM legacy
layout (tests/fixture_makers/realworld_megatron_maker.py).

What holds today: the manifest holds the planned cases with their truth, and the files load
with the real clients (megatron-core's ``load_common_state_dict`` / ``load_sharded_metadata`` /
``load_plain_tensors`` under a gloo world of 1, in a subprocess; ``torch.load`` for the legacy
``model_optim_rng.pt`` / ``distrib_optim.pt`` as Megatron-LM loads them; transformers'
``LlamaForCausalLM`` for the HF equivalent of the Llama-style model). ckpt_explorer's verdicts
on them (tests/realworld_check.py) are expected to fail until its Megatron readers exist.
"""

from __future__ import annotations

import json
import subprocess
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

sys.path.insert(0, str(Path(__file__).parent.parent / "fixture_makers"))
from realworld_megatron_maker import BASE_STEPS, planned_cases

MAKER = "realworld_megatron"
PLAN = planned_cases()
STATES = sorted(PLAN)
RESUMES = resumed_ids(PLAN)

# megatron-core's own loaders need a process group: a gloo world of 1 in a subprocess
VERIFY = r"""
import json, os, socket, sys, warnings
warnings.simplefilter("ignore")
import torch.distributed as dist
from megatron.core.dist_checkpointing.mapping import ShardedObject
from megatron.core.dist_checkpointing.serialization import (
    load_common_state_dict, load_content_metadata, load_plain_tensors, load_sharded_metadata)
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
dist.init_process_group("gloo")
out = {}
for path in sys.argv[1:]:
    common = load_common_state_dict(path)
    meta = load_sharded_metadata(path)
    plain = load_plain_tensors(path)
    out[path] = {
        "common": sorted(common),
        "iteration": common["iteration"],
        "checkpoint_version": common["checkpoint_version"],
        "consumed_train_samples": common["args"].consumed_train_samples,
        "scheduler": common.get("opt_param_scheduler"),
        "tensors": {k: list(v.global_shape) for k, v in meta.items()
                    if not isinstance(v, ShardedObject)},
        "objects": sorted(k.split("/")[0] for k, v in meta.items() if isinstance(v, ShardedObject)),
        "plain": {k: list(v.shape) for k, v in plain.items() if hasattr(v, "shape")},
        "content_metadata": load_content_metadata(path),
    }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def corpus(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints(MAKER)
    return Path(root), manifest


@pytest.fixture(scope="module")
def dist_loaded(corpus: tuple[Path, dict[str, Any]]) -> dict[str, Any]:
    """What megatron-core's loaders read from every torch_dist case, keyed by case id."""
    root, manifest = corpus
    ids = [cid for cid, c in manifest["cases"].items() if c["ckpt_format"] == "torch_dist"]
    paths = [str(root / manifest["cases"][cid]["path"]) for cid in ids]
    proc = subprocess.run(
        [sys.executable, "-c", VERIFY, *paths], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return {cid: data[p] for cid, p in zip(ids, paths, strict=True)}


def test_manifest_holds_the_planned_cases_with_their_truth(
    corpus: tuple[Path, dict[str, Any]],
) -> None:
    root, manifest = corpus
    cases = manifest["cases"]
    assert_cases_as_planned(cases, PLAN)
    for cid, case in cases.items():
        assert case["kind"] == "training_state", cid
        assert (root / case["path"]).is_dir(), cid
        assert (root / case["save_dir"] / "latest_checkpointed_iteration.txt").read_text() == str(
            case["global_steps"]
        ), cid
        if case.get("resume_of"):
            assert cases[case["resume_of"]]["expect"] == "clean", cid
        if case["ckpt_format"] == "torch" and case["distributed_optimizer"]:
            assert case["buffer_layout"] and case["optimizer_ids"], cid
        else:
            assert case["id_names"] and all(case["id_names"].values()), cid
    for key in ("mcore_gpt", "legacy_tp2"):
        assert cases[f"{key}_base"]["global_steps"] == BASE_STEPS
        assert cases[f"{key}_optimizer_not_loaded_1"]["global_steps"] == BASE_STEPS + 1
        assert cases[f"{key}_optimizer_not_loaded_3"]["global_steps"] == BASE_STEPS + 3
        # the scheduler restarted at the resume: its sample count is 3 iterations', not 7's
        clean, faulty = cases[f"{key}_resume_clean"], cases[f"{key}_scheduler_not_loaded"]
        assert faulty["scheduler_num_steps"] * 7 == clean["scheduler_num_steps"] * 3, key
        assert faulty["global_steps"] == clean["global_steps"] == BASE_STEPS + 3


def test_dist_checkpoints_load_with_megatron_core(
    corpus: tuple[Path, dict[str, Any]], dist_loaded: dict[str, Any]
) -> None:
    _, manifest = corpus
    for cid, got in dist_loaded.items():
        case = manifest["cases"][cid]
        assert got["iteration"] == case["global_steps"], cid
        assert got["checkpoint_version"] == 3.0, cid
        assert got["consumed_train_samples"] == case["consumed_train_samples"], cid
        assert got["scheduler"]["num_steps"] == case["scheduler_num_steps"], cid
        assert {"args", "iteration", "num_floating_point_operations_so_far"} <= set(got["common"])
        assert ("rng_state" in got["objects"]) == (case["expect"] != "rng_state_missing"), cid
        want = "dp_reshardable" if case["distributed_optimizer"] else None
        if "fully_reshardable" in cid:
            want = "fully_reshardable"
        assert got["content_metadata"].get("distrib_optim_sharding_type") == want, cid
        # every parameter's sharded key is in the checkpoint with the global shape recorded
        for rank_keys in case["sharded_keys"]:
            for name, shards in rank_keys.items():
                for shard in shards:
                    assert got["tensors"][shard["key"]] == shard["global_shape"], (cid, name)
                    assert shard["key"] in got["plain"], (cid, name)
        for rank_keys in case["optimizer_keys"]:
            for entry in rank_keys.values():
                for key in entry["keys"].values():
                    assert key in got["tensors"], (cid, key)


@pytest.mark.parametrize("case_id", sorted(cid for cid in PLAN if cid.startswith("legacy_tp2")))
def test_legacy_checkpoints_load_with_torch(
    corpus: tuple[Path, dict[str, Any]], case_id: str
) -> None:
    """``torch.load`` of each ``mp_rank_TT/model_optim_rng.pt``, as Megatron-LM loads it."""
    root, manifest = corpus
    case = manifest["cases"][case_id]
    folder = root / case["path"]
    assert folder.name == f"iter_{case['global_steps']:07d}"
    for rel, tensors in case["model_tensors"].items():
        sd = torch.load(folder / rel, map_location="cpu", weights_only=False)
        assert sd["checkpoint_version"] == 3.0 and sd["iteration"] == case["global_steps"]
        assert sd["args"].tensor_model_parallel_size == 2
        assert sd["opt_param_scheduler"]["num_steps"] == case["scheduler_num_steps"]
        assert ("rng_state" in sd) == (case["expect"] != "rng_state_missing"), rel
        shapes = {k: list(v.shape) for k, v in sd["model"].items() if hasattr(v, "shape")}
        assert shapes == {k: v["shape"] for k, v in tensors.items()}, rel
        if case["distributed_optimizer"]:
            assert set(sd["optimizer"]) == {"optimizer"}
            assert "state" not in sd["optimizer"]["optimizer"]
            flat = torch.load(folder / rel.replace("model_optim_rng", "distrib_optim"))
            assert flat["buckets_coalesced"] is True and 0 in flat
        else:
            ids = {str(i) for g in sd["optimizer"]["param_groups"] for i in g["params"]}
            assert ids == set(case["id_names"][rel]), rel


def test_hf_equivalent_gives_megatron_cores_logits(corpus: tuple[Path, dict[str, Any]]) -> None:
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    root, manifest = corpus
    eq = manifest["cases"]["mcore_llama_base"]["hf_equivalent"]
    folder = root / eq["path"]
    model = LlamaForCausalLM(LlamaConfig(**eq["config"])).eval()
    weights = load_file(folder / eq["weights"])
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    probe = torch.load(folder / eq["probe"], weights_only=True)
    with torch.no_grad():
        logits = model(input_ids=probe["tokens"]).logits
    assert float((logits - probe["logits"]).abs().max()) < 1e-4


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
