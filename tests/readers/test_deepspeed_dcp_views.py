"""DeepSpeed ZeRO logical view and DCP FQN-keyed optimizers, against what the tools wrote.

Ground truth comes from the tools themselves (tests/fixture_makers/deepspeed_maker.py and
dcp_maker.py): DeepSpeed's gathered parameters and safe_get_full_optimizer_state, torch's own
optimizer numbering and state_dict.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from ckpt_explorer import open_checkpoint
from ckpt_explorer.errors import CkptExplorerError
from ckpt_explorer.plain import to_plain
from ckpt_explorer.readers.dcp.optim import state_records
from ckpt_explorer.validate.parts import collect
from ckpt_explorer.view import CheckpointView

ZERO = [
    "ds_zero1",
    "ds_zero2",
    "ds_zero3",
    "ds_zero2_bf16",
    "ds_zero3_warmup",
    "ds_zero2_steplr",
    "ds_zero3_world2",
    "ds_zero2_world2",
]


def _same(t: Any, entry: dict[str, Any]) -> bool:
    return list(t.shape) == entry["shape"] and math.isclose(
        float(t.double().sum()), entry["sum"], rel_tol=1e-12, abs_tol=1e-12
    )


def _optim_part(view: CheckpointView) -> CheckpointView:
    found = [p for n, p in view.parts.items() if "optim_states" in n and p.optimizer]
    assert len(found) == 1, sorted(view.parts)
    return found[0]


@pytest.mark.parametrize("case", ["ds_zero3", "ds_zero3_warmup", "ds_zero3_world2"])
def test_zero3_parameters_have_true_shapes_and_values(real_checkpoints: Any, case: str) -> None:
    root, manifest = real_checkpoints("deepspeed")
    c = manifest["cases"][case]
    view = open_checkpoint(root / c["path"])
    shapes = {n: s for g in c["param_shapes"] for n, s in g.items()}
    saved = c["module_as_saved"]
    assert all(saved[n]["shape"] == [0] for n in shapes)  # the file holds placeholders
    for name, shape in shapes.items():
        rec = view.record(f"model/{name}")
        assert list(rec.shape) == shape and rec.dtype == c["tensors"][f"model/{name}"]["dtype"]
        assert _same(view.load(f"model/{name}"), c["tensors"][f"model/{name}"]), name
    if case == "ds_zero3_warmup":  # a frozen parameter: rebuilt from frozen_param_fragments
        assert "1.bias" not in shapes and saved["1.bias"]["shape"] == [0]
        assert _same(view.load("model/1.bias"), c["tensors"]["model/1.bias"])
    model_part = next(p for n, p in view.parts.items() if n.endswith("model_states.pt"))
    assert not [r for r in model_part.tensors if r.name.startswith("module.") and r.numel == 0]


def test_zero3_placeholder_without_partitions_does_not_load(
    real_checkpoints: Any, tmp_path: Path
) -> None:
    root, manifest = real_checkpoints("deepspeed")
    folder = tmp_path / "ds"
    shutil.copytree(root / manifest["cases"]["ds_zero3"]["path"], folder)
    for f in folder.glob("*/*optim_states.pt"):
        f.unlink()
    view = open_checkpoint(folder)
    rec = view.record("model/0.weight")
    assert rec.shape == (5, 4) and rec.read_values is None
    with pytest.raises(CkptExplorerError):
        view.load("model/0.weight")
    assert any("0.weight" in w for w in view.warnings)
    assert view.load("model/1.running_mean").shape == (5,)  # buffers are real


@pytest.mark.parametrize("case", ZERO)
def test_zero_optimizer_groups_and_recorded_names(real_checkpoints: Any, case: str) -> None:
    root, manifest = real_checkpoints("deepspeed")
    c = manifest["cases"][case]
    view = open_checkpoint(root / c["path"])
    info = _optim_part(view).optimizer
    assert info is not None
    assert [len(g["params"]) for g in info.param_groups] == [
        g["params"] for g in c["optimizer_groups"]
    ]
    assert [g["weight_decay"] for g in info.param_groups] == [
        g["weight_decay"] for g in c["optimizer_groups"]
    ]
    assert [info.names[i].name for i in sorted(info.names)] == c["optimizer_names"]
    assert {n.how for n in info.names.values()} == {"recorded"}
    assert info.param_names == dict(enumerate(c["optimizer_names"]))
    assert [p for g in info.param_groups for p in g["params"]] == list(range(len(info.names)))


@pytest.mark.parametrize("case", ZERO)
def test_zero_per_parameter_state_views(real_checkpoints: Any, case: str) -> None:
    root, manifest = real_checkpoints("deepspeed")
    c = manifest["cases"][case]
    part = _optim_part(open_checkpoint(root / c["path"]))
    info = part.optimizer
    assert info is not None and info.state_ids == tuple(range(len(c["optimizer_names"])))
    for pid, name in enumerate(c["optimizer_names"]):
        assert set(info.state_names[pid]) == {"step", "exp_avg", "exp_avg_sq"}
        for state in ("exp_avg", "exp_avg_sq"):
            got = part.load(f"state.{pid}.{state}")
            assert _same(got, c["optim_states"][name][state]), (pid, name, state)
        assert float(part.load(f"state.{pid}.step")) == c["values"]["global_steps"]
    # the flat partitions stay listed under their own names, one per group
    flat = [r.name for r in part.tensors if r.name.endswith("exp_avg") and "state_dict." in r.name]
    assert len(flat) == len(info.param_groups)


def test_zero_optimizer_file_alone_shows_its_groups(real_checkpoints: Any) -> None:
    root, manifest = real_checkpoints("deepspeed")
    for case in ("ds_zero2", "ds_zero3"):
        folder = root / manifest["cases"][case]["path"]
        file = next(folder.glob("*/*optim_states.pt"))
        info = open_checkpoint(file).optimizer
        assert info is not None and len(info.param_groups) == 2, case
        assert [g["params"] for g in info.param_groups] == [[0], [1]]  # one flat partition each
        assert info.state_ids == (0, 1)
        assert not any(n.known for n in info.names.values())  # partitions, not parameters


@pytest.mark.parametrize("case", ["ds_zero0", "ds_zero2", "ds_zero3_warmup", "ds_zero2_steplr"])
def test_scheduler_and_run_position_are_parts(real_checkpoints: Any, case: str) -> None:
    root, manifest = real_checkpoints("deepspeed")
    c = manifest["cases"][case]
    view = open_checkpoint(root / c["path"])
    found = collect(view)
    want = c["lr_scheduler"]
    if want is None:
        assert not found.schedulers
    else:
        assert len(found.schedulers) == 1
        assert to_plain(found.schedulers[0].values) == want
    if case == "ds_zero3_warmup":  # WarmupLR counts from -1: steps taken - 1
        assert want == {"last_batch_iteration": c["values"]["global_steps"] - 1}
    if case == "ds_zero2_steplr":
        assert want["last_epoch"] == c["values"]["global_steps"]
    run = {k: v for rs in found.run_states for k, v in rs.values.items()}
    for key in ("global_steps", "global_samples", "skipped_steps"):
        assert run[key] == c["values"][key]


def test_zero0_client_optimizer_is_a_torch_optimizer_part(real_checkpoints: Any) -> None:
    root, manifest = real_checkpoints("deepspeed")
    view = open_checkpoint(root / manifest["cases"]["ds_zero0"]["path"])
    part = next(p for n, p in view.parts.items() if n.endswith(":optimizer"))
    assert part.kind == "optimizer" and part.optimizer is not None
    assert [g["params"] for g in part.optimizer.param_groups] == [[0, 1], [2, 3, 4, 5]]
    assert part.record("state.4.exp_avg").shape == (3, 5)
    model = next(p for n, p in view.parts.items() if n.endswith("model_states.pt"))
    assert not [r for r in model.tensors if r.name.startswith("optimizer.")]


def test_dcp_fqn_optimizer_is_numbered_and_named(real_checkpoints: Any) -> None:
    root, manifest = real_checkpoints("dcp")
    c = manifest["cases"]["dcp_fqn_state"]
    view = open_checkpoint(root / c["path"])
    info = view.optimizer
    assert info is not None
    assert [info.names[i].name for i in sorted(info.names)] == c["optimizer_names"]
    assert {n.how for n in info.names.values()} == {"recorded"}
    assert [len(g["params"]) for g in info.param_groups] == [
        g["params"] for g in c["optimizer_groups"]
    ]
    assert [g["weight_decay"] for g in info.param_groups] == [
        g["weight_decay"] for g in c["optimizer_groups"]
    ]
    states = state_records("optim.", info, view.tensors)
    assert sorted(states) == sorted(int(k) for k in c["optimizer_states"])
    for pid, want in c["optimizer_states"].items():
        for state, entry in want.items():
            assert _same(view.load(states[int(pid)][state].name), entry), (pid, state)
    # the records keep the names the file gives them
    assert f"optim.state.{c['optimizer_names'][1]}.exp_avg" in view


def test_dcp_integer_id_optimizer_gets_its_groups(real_checkpoints: Any) -> None:
    root, manifest = real_checkpoints("dcp")
    view = open_checkpoint(root / manifest["cases"]["dcp_training_state"]["path"])
    info = view.optimizer
    assert info is not None and len(info.param_groups) == 2
    assert [g["params"] for g in info.param_groups] == [[0, 1], [2, 3, 4, 5]]
    # ids only: any names come from alignment with the model, never "recorded"
    assert not any(n.how == "recorded" for n in info.names.values())
    assert state_records("optim.", info, view.tensors)[5]["exp_avg"].shape == (2,)


def test_flat_partition_padding_is_not_a_numeric_finding(real_checkpoints: Any) -> None:
    """DeepSpeed leaves the alignment padding of its flat fp32 partitions uninitialised (one
    run of this maker had values near 1e35 in rank 1's): no numeric finding may come from the
    raw partitions, while the scan still covers the per-parameter views."""
    from ckpt_explorer.validate import validate_checkpoint

    root, manifest = real_checkpoints("deepspeed")
    case = root / manifest["cases"]["ds_zero3_world2"]["path"]
    report = validate_checkpoint(case)
    assert not [f for f in report.findings if f.rule.startswith("numeric.")], report.findings
    assert report.stats and any(".state." in "." + k.replace("/", ".") for k in report.stats)


def test_numeric_rules_skip_only_the_raw_partitions() -> None:
    import torch

    from ckpt_explorer.types import TensorRecord
    from ckpt_explorer.validate.numeric import TensorStats, findings_for, tensor_stats

    garbage = torch.tensor([0.1, 2.5e35, float("nan"), 0.0])
    stats = tensor_stats(garbage)
    assert isinstance(stats, TensorStats) and stats.nan == 1
    flat = "zero_pp_rank_1_mp_rank_00_optim_states.pt/optimizer_state_dict.fp32_flat_groups.1"
    record = TensorRecord(flat, "float32", (4,), 16, "x.pt")
    assert findings_for(flat, record, stats) == []
    rules = {f.rule for f in findings_for("layer.weight", record, stats)}
    assert rules == {"numeric.nonfinite", "numeric.extreme"}
