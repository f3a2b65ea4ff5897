"""Sharded listings: records in the index's order, each only from the shard the index names
(checked at once when the shards hold exactly the index's tensors, shard by shard else)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from ckpt_explorer import open_checkpoint

S1, S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
SHARDS = {S1: ("a", "b"), S2: ("c", "d")}


def _folder(
    tmp_path: Path,
    weight_map: dict[str, str],
    extra: dict[str, tuple[str, ...]] | None = None,
    shards: dict[str, tuple[str, ...]] = SHARDS,
) -> Path:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for shard, names in shards.items():
        names = names + (extra or {}).get(shard, ())
        save_file(
            {n: np.full((i + 1, 2), i, dtype=np.float32) for i, n in enumerate(names)},
            str(folder / shard),
        )
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return folder


INTACT = {"d": S2, "a": S1, "c": S2, "b": S1}  # not the shards' order: the index's wins
CASES = {
    "intact": (INTACT, {}, ["d", "a", "c", "b"], []),
    "named in another shard": (
        {**INTACT, "b": S2},
        {},
        ["d", "a", "c"],
        [f"{S1} holds 1 tensor(s) the index does not name",
         "1 name(s) in the index are not in their shard, e.g. b"],
    ),
    "a name no shard holds": (
        {**INTACT, "e": S1},
        {},
        ["d", "a", "c", "b"],
        ["1 name(s) in the index are not in their shard, e.g. e"],
    ),
    "a tensor the index does not name": (
        {k: v for k, v in INTACT.items() if k != "c"}, {}, ["d", "a", "b"],
        [f"{S2} holds 1 tensor(s) the index does not name"],
    ),
    "one name in two shards": (INTACT, {S2: ("a",)}, ["d", "a", "c", "b"],
                               [f"{S2} holds 1 tensor(s) the index does not name"]),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_records_follow_the_index(tmp_path: Path, case: str) -> None:
    weight_map, extra, names, warnings = CASES[case]
    view = open_checkpoint(_folder(tmp_path, weight_map, extra))
    assert [r.name for r in view.tensors] == names
    assert list(view.warnings) == warnings
    for r in view.tensors:
        assert r.file == weight_map[r.name]  # each from the shard the index names
        rows = view.load(r.name).shape[0]
        assert rows == r.shape[0] and view.load(r.name)[0, 0] == rows - 1


def test_pipeline_stages_list_stage_by_stage(tmp_path: Path) -> None:
    late, early = (
        "model-stage-00001-shard-00000.safetensors",
        "model-stage-00000-shard-00000.safetensors",
    )
    shards = {late: ("c", "d"), early: ("a", "b")}
    weight_map = {"d": late, "c": late, "b": early, "a": early}  # as merged from the stages
    view = open_checkpoint(_folder(tmp_path, weight_map, shards=shards))
    assert [r.name for r in view.tensors] == ["b", "a", "d", "c"] and not view.warnings
