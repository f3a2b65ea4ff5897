"""The Megatron readers on real megatron-core / Megatron-LM outputs
(tests/fixture_makers/realworld_megatron_maker.py): detection, the per-layer listing against
megatron-core's own sharded keys, values against torch DCP's own load of the stacked tensors,
the legacy tensor-parallel merge against concatenating the rank files as megatron's converter
does, optimizer names against the live optimizers' ids, and the run position parts."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from realworld_check import check_names

from ckpt_explorer import detect_format, diff_checkpoints, open_checkpoint
from ckpt_explorer.inspect_report import inspect_report
from ckpt_explorer.view import CheckpointView

MAKER = "realworld_megatron"


@pytest.fixture(scope="module")
def corpus(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints(MAKER)
    return Path(root), manifest["cases"]


@pytest.fixture(scope="module")
def views(corpus: tuple[Path, dict[str, Any]]) -> dict[str, CheckpointView]:
    root, cases = corpus
    return {cid: open_checkpoint(root / c["path"]) for cid, c in cases.items()}


def _dist(cases: dict[str, Any]) -> list[str]:
    return sorted(cid for cid, c in cases.items() if c["ckpt_format"] == "torch_dist")


def _legacy(cases: dict[str, Any]) -> list[str]:
    return sorted(cid for cid, c in cases.items() if c["ckpt_format"] == "torch")


def dcp_oracle(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a DCP folder as torch's own DCP loader reads it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    meta = FileSystemReader(str(folder)).read_metadata()
    out = {
        k: torch.empty(tuple(v.size), dtype=v.properties.dtype)
        for k, v in meta.state_dict_metadata.items()
        if isinstance(v, TensorStorageMetadata)
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(out, storage_reader=FileSystemReader(str(folder)), no_dist=True)
    return out


def test_every_case_detects_as_its_family_and_its_save_dir_too(
    corpus: tuple[Path, dict[str, Any]], views: dict[str, CheckpointView]
) -> None:
    root, cases = corpus
    for cid, case in cases.items():
        found = detect_format(root / case["path"])
        assert (found.family, found.kind) == (case["family"], "training_state"), cid
        assert (views[cid].family, views[cid].kind) == (case["family"], "training_state")
        if case["ckpt_format"] == "torch_dist":
            assert any("sharded_backend 'torch_dist'" in e for e in found.evidence), cid
        saved = detect_format(root / case["save_dir"])
        assert saved.family == case["family"], cid
        assert "latest_checkpointed_iteration.txt names iteration" in saved.evidence[0], cid
    cid = "mcore_gpt_base"
    whole = open_checkpoint(root / cases[cid]["save_dir"])
    assert set(whole.parts) == set(views[cid].parts)
    assert whole.parts["model"].names() == views[cid].parts["model"].names()
    assert all(r.file.startswith("iter_0000004/") for r in whole.tensors)


def test_a_plain_dcp_folder_is_still_torch_dcp(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(
            {"model.w": torch.ones(2, 3), "step": 3}, checkpoint_id=str(tmp_path), no_dist=True
        )
    assert detect_format(tmp_path).family == "torch-dcp"
    (tmp_path / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    assert detect_format(tmp_path).family == "torch-dcp"  # no common.pt: not megatron's
    torch.save({"iteration": 1}, tmp_path / "common.pt")
    (tmp_path / "metadata.json").write_text('{"sharded_backend": "zarr"}')
    assert detect_format(tmp_path).family == "torch-dcp"


def test_dist_lists_each_layer_with_megatron_cores_names_and_shapes(
    corpus: tuple[Path, dict[str, Any]], views: dict[str, CheckpointView]
) -> None:
    _, cases = corpus
    for cid in _dist(cases):
        case = cases[cid]
        model = views[cid].parts["model"]
        truth = case["sharded_keys"][0]
        # every parameter, in named_parameters() / state_dict order, under its module name
        assert model.names() == [n for n in case["model_tensors"][0] if n in truth], cid
        for name, shards in truth.items():
            shard = shards[0]
            rec = model.record(name)
            assert list(rec.shape) == shard["global_shape"][shard["prepend_axis_num"] :], name
            assert rec.dtype == shard["dtype"], name


def _key_and_layer(shard: dict[str, Any]) -> tuple[str, int | None]:
    return shard["key"], shard["global_offset"][0] if shard["prepend_axis_num"] else None


def test_dist_layer_values_are_the_stacked_tensors_slices(
    corpus: tuple[Path, dict[str, Any]], views: dict[str, CheckpointView]
) -> None:
    root, cases = corpus
    for cid in ("mcore_gpt_base", "mcore_llama_base", "dist_tp2_base"):
        case = cases[cid]
        oracle = dcp_oracle(root / case["path"])
        view = views[cid]
        for name, shards in case["sharded_keys"][0].items():
            key, layer = _key_and_layer(shards[0])
            want = oracle[key] if layer is None else oracle[key][layer]
            assert torch.equal(view.load(f"model/{name}"), want), (cid, name)
            if case["tp"] == 1:
                got = float(view.load(f"model/{name}").double().sum())
                assert got == pytest.approx(case["model_tensors"][0][name]["sum"], abs=1e-6)
        by_param = {e["param"]: (pid, e["keys"]) for pid, e in case["optimizer_keys"][0].items()}
        for name, (pid, keys) in by_param.items():
            _, layer = _key_and_layer(case["sharded_keys"][0][name][0])
            for state, key in keys.items():
                want = oracle[key] if layer is None else oracle[key][layer]
                assert torch.equal(view.load(f"optimizer/state.{pid}.{state}"), want), (cid, key)


def megatron_merge(name: str, shards: list[torch.Tensor], swiglu: bool) -> torch.Tensor:
    """How megatron's checkpoint converter joins a GPT parameter's tensor-parallel shards."""
    if name.endswith("mlp.linear_fc1.weight") and swiglu:
        halves = [s.chunk(2, dim=0) for s in shards]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
    column = ("word_embeddings.weight", "output_layer.weight", "linear_qkv.weight", "fc1.weight")
    if name.endswith(column):
        return torch.cat(shards, dim=0)
    if name.endswith(("linear_proj.weight", "linear_fc2.weight")):
        return torch.cat(shards, dim=1)
    assert all(torch.equal(s, shards[0]) for s in shards), name
    return shards[0]


def _rank_files(root: Path, case: dict[str, Any]) -> list[dict[str, Any]]:
    folder = root / case["path"]
    files = [f for f in case["files"] if f.endswith("model_optim_rng.pt")]
    return [torch.load(folder / f, map_location="cpu", weights_only=False) for f in files]


def test_legacy_tp_merge_is_megatrons_and_equals_the_dist_save_of_the_same_run(
    corpus: tuple[Path, dict[str, Any]], views: dict[str, CheckpointView]
) -> None:
    root, cases = corpus
    for cid in ("legacy_tp2_base", "legacy_tp2_distopt_base"):
        ranks = _rank_files(root, cases[cid])
        swiglu = ranks[0]["args"].swiglu
        model = views[cid].parts["model"]
        names = [k for k, v in ranks[0]["model"].items() if isinstance(v, torch.Tensor)]
        assert model.names() == names, cid
        for name in names:
            want = megatron_merge(name, [sd["model"][name] for sd in ranks], swiglu)
            assert torch.equal(model.load(name), want), (cid, name)
        rules = model.values["tp_merge"]
        assert "gate halves, then up halves" in rules["decoder.layers.0.mlp.linear_fc1.weight"]
        assert rules["decoder.layers.1.self_attention.linear_proj.weight"].startswith(
            "row-parallel linear_proj: joined on dim 1"
        )
    # the tp-2 legacy and torch_dist saves come from the same seeds and batches
    legacy, dist = views["legacy_tp2_base"], views["dist_tp2_base"]
    for name in legacy.parts["model"].names():
        assert torch.equal(legacy.load(f"model/{name}"), dist.load(f"model/{name}")), name
    # the joined optimizer: every id's states joined as its parameter, named as on each rank
    ranks = _rank_files(root, cases["legacy_tp2_base"])
    opt = legacy.parts["optimizer"]
    assert opt.optimizer is not None
    for pid, name in opt.optimizer.param_names.items():
        for state in ("exp_avg", "exp_avg_sq"):
            shards = [sd["optimizer"]["state"][pid][state] for sd in ranks]
            want = megatron_merge(name, shards, ranks[0]["args"].swiglu)
            assert torch.equal(opt.load(f"state.{pid}.{state}"), want), (pid, state)
        dist_opt = dist.parts["optimizer"]
        assert dist_opt.optimizer is not None
        assert dist_opt.optimizer.param_names[pid] == name  # both numbered alike


def test_pipeline_stages_are_joined_with_their_layers_offset(
    corpus: tuple[Path, dict[str, Any]], views: dict[str, CheckpointView], tmp_path: Path
) -> None:
    """The tp-2 state re-saved as two pipeline stages (layer 0 / layer 1 + head), as
    Megatron-LM names them (``mp_rank_TT_PPP``) and numbers their layers (from 0 per stage)."""
    root, cases = corpus
    case = cases["legacy_tp2_base"]
    folder = tmp_path / "iter_0000004"
    for tp, sd in enumerate(_rank_files(root, case)):
        model = sd["model"]
        stages = [
            {
                k: v
                for k, v in model.items()
                if not k.startswith(("decoder.layers.1.", "decoder.final", "output"))
            },
            {
                k.replace("decoder.layers.1.", "decoder.layers.0."): v
                for k, v in model.items()
                if k.startswith(("decoder.layers.1.", "decoder.final", "output"))
            },
        ]
        for pp, stage in enumerate(stages):
            out = folder / f"mp_rank_{tp:02d}_{pp:03d}" / "model_optim_rng.pt"
            out.parent.mkdir(parents=True)
            torch.save({**sd, "model": stage}, out)
    view = open_checkpoint(folder)
    assert view.family == "megatron-legacy"
    whole = views["legacy_tp2_base"].parts["model"]
    assert view.parts["model"].names() == whole.names()
    for name in whole.names():
        assert torch.equal(view.parts["model"].load(name), whole.load(name)), name
    assert any("2 pipeline stage(s)" in e for e in view.detection.evidence)
    assert set(view.parts) >= {"mp_rank_00_000", "mp_rank_01_001", "scheduler", "running_state"}


def test_optimizer_names_against_the_live_optimizers(
    corpus: tuple[Path, dict[str, Any]], views: dict[str, CheckpointView]
) -> None:
    root, cases = corpus
    figures: dict[str, Counter[str]] = {}
    for cid, case in cases.items():
        checks, missing = check_names(root / case["path"], views[cid], case["id_names"])
        assert not missing, cid
        figures[cid] = Counter(n.verdict for n in checks)
    print("\noptimizer ids per case (right / unknown / wrong):")
    for cid, n in figures.items():
        print(f"  {cid:45} {n['right']:3} / {n['unknown']:3} / {n['wrong']:3}")
    for cid, n in figures.items():
        case = cases[cid]
        if case.get("shape_visible") is False:
            continue  # a swap of same-shaped parameters: no file can show it (realworld_check)
        assert n["wrong"] == 0, cid
        flat = case["distributed_optimizer"] and "fully_reshardable" not in cid
        if flat:  # dp_reshardable / distrib_optim.pt: ranges not recorded
            assert n["right"] == 0, cid
        else:
            assert n["unknown"] == 0 and n["right"] == sum(n.values()) > 0, cid
    assert {n["right"] for cid, n in figures.items() if cid.startswith("mcore_gpt_")} >= {29}


def test_run_position_scheduler_rng_and_step_parts(
    corpus: tuple[Path, dict[str, Any]], views: dict[str, CheckpointView]
) -> None:
    _, cases = corpus
    for cid, case in cases.items():
        view = views[cid]
        kinds = {name: p.kind for name, p in view.parts.items()}
        for part in ("model", "optimizer", "scheduler", "running_state", "args"):
            assert kinds.get(part) == part, (cid, part)
        assert ("rng" in view.parts) == (case["expect"] != "rng_state_missing"), cid
        run = view.parts["running_state"].values
        assert run["iteration"] == case["global_steps"], cid
        assert run["consumed_train_samples"] == case["consumed_train_samples"], cid
        assert run["global_batch_size"] * case["global_steps"] == case["consumed_train_samples"]
        assert view.parts["scheduler"].values["num_steps"] == case["scheduler_num_steps"], cid
        opt = view.parts["optimizer"]
        assert opt.optimizer is not None
        groups = opt.optimizer.param_groups
        if "state.0.step" in opt:
            assert float(opt.load("state.0.step")) == case["optimizer_step"], cid
        elif "state.0.step" in opt.values:
            assert opt.values["state.0.step"] == case["optimizer_step"], cid
        else:  # the flat DistributedOptimizer: the step is in every group
            assert {g["step"] for g in groups} == {case["optimizer_step"]}, cid
        assert [g["lr"] for g in groups] == case["lr"], cid


def test_diff_of_a_resume_pairs_optimizer_states_by_parameter_name(
    corpus: tuple[Path, dict[str, Any]], views: dict[str, CheckpointView]
) -> None:
    result = diff_checkpoints(views["mcore_gpt_base"], views["mcore_gpt_resume_clean"])
    frame = result.to_frame()
    optim = frame[frame["part"] == "optimizer"]
    assert len(optim) == 29 * 3 and set(optim["match"]) == {"param_name"}
    assert set(frame[frame["part"] == "model"]["match"]) == {"exact"}
    assert not frame["status"].str.startswith("only").any()
    assert set(optim[optim["state"] == "step"]["status"]) == {"changed"}  # 4 -> 7


def test_parameter_count_counts_the_model_only(views: dict[str, CheckpointView]) -> None:
    for cid in ("mcore_llama_base", "dist_tp2_base", "legacy_tp2_base", "legacy_tp2_distopt_base"):
        report = json.loads(json.dumps(inspect_report(views[cid]), default=str))
        assert report["parameter_count"] == 6736, cid  # LlamaForCausalLM's count for this model


LISTING = r"""
import sys
from ckpt_explorer import open_checkpoint
from ckpt_explorer.inspect_report import format_inspect
for path in sys.argv[1:]:
    format_inspect(open_checkpoint(path), limit=None)
assert "torch" not in sys.modules, "listing imported torch"
"""


def test_listing_imports_no_torch(corpus: tuple[Path, dict[str, Any]]) -> None:
    root, cases = corpus
    paths = [str(root / cases[c]["path"]) for c in ("dist_tp2_base", "legacy_tp2_base")]
    paths.append(str(root / cases["mcore_gpt_distopt_base"]["save_dir"]))
    proc = subprocess.run([sys.executable, "-c", LISTING, *paths], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
