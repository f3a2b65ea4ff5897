"""The quantized view made lazily (DeepSeek-V3-shaped FP8 folders list at the speed of the
plain listing): the records are the ones each weight's parts gave when they were built one by
one, the weights' descriptions are a dict to every consumer, and the config checks made once
per family and shape find what a weight-by-weight check finds."""

from __future__ import annotations

import copy
import json
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest

from ckpt_explorer import open_checkpoint
from ckpt_explorer.io.location import as_location
from ckpt_explorer.plain import MAX_ITEMS, to_plain
from ckpt_explorer.readers.hf import sharded_index
from ckpt_explorer.readers.quantized import fp8_block
from ckpt_explorer.readers.quantized.checks import RULE_PARTS, check_config
from ckpt_explorer.readers.quantized.folder import QUANT_KEY, quant_weights
from ckpt_explorer.readers.quantized.parts import Part, StoredParts
from ckpt_explorer.record_table import RecordTable
from ckpt_explorer.types import TensorRecord

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import frontier_maker  # noqa: E402

TINY = {"hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 128}
TINY |= {"n_routed_experts": 12, "q_lora_rank": 64, "kv_lora_rank": 32, "vocab_size": 1000}
TINY |= {"num_attention_heads": 2, "first_k_dense_replace": 1}
FP8 = "fp8_e4m3/block128x128"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ds") / "deepseek"
    frontier_maker.make("deepseek-v3", out, layers=3, **TINY)
    return out


def _one_by_one(folder: Path) -> list[tuple[Any, ...]]:
    """The records as the reader built them weight by weight: each ``.weight`` with a
    ``.weight_scale_inv`` becomes one record where its first part is listed, its bytes the
    parts' bytes; every other tensor as listed."""
    where = as_location(folder)
    base = sharded_index.open_sharded(where, sharded_index.probe_dir(where))
    raw = {r.name: r for r in base.tensors}
    out, seen = [], set()
    for r in base.tensors:
        weight = r.name.removesuffix("_scale_inv")
        if f"{weight}_scale_inv" not in raw:
            out.append((r.name, r.dtype, tuple(r.shape), r.nbytes, r.file, r.offset))
        elif weight not in seen:
            seen.add(weight)
            w, s = raw[weight], raw[f"{weight}_scale_inv"]
            out.append((weight, FP8, tuple(w.shape), w.nbytes + s.nbytes, r.file, None))
    return out


def test_records_are_those_made_weight_by_weight(folder: Path) -> None:
    view = open_checkpoint(folder)
    assert view.family == "hf-quantized" and not view.warnings
    got = [(r.name, r.dtype, tuple(r.shape), r.nbytes, r.file, r.offset) for r in view.tensors]
    assert got == _one_by_one(folder)
    # the columns a summary reads are the records' own
    assert list(view.tensors.column("nbytes")) == [r.nbytes for r in view.tensors]
    weights = quant_weights(view)
    assert weights is not None and len(weights) == sum(r.dtype == FP8 for r in view.tensors)
    name = next(r.name for r in view.tensors if r.dtype == FP8)
    w = weights[name]
    assert w.parts == {"weight": name, "weight_scale_inv": f"{name}_scale_inv"}
    assert tuple(view.load(name).shape) == w.shape  # dequantized from its parts
    assert view.record(name).read_values is not None


def test_descriptions_are_a_dict_to_every_consumer(folder: Path) -> None:
    view = open_checkpoint(folder)
    described = view.values[QUANT_KEY]["weights"]
    weights = quant_weights(view)
    assert weights is not None and isinstance(described, dict)
    plain = to_plain(described)  # inspect --json: the first entries, made alone
    made = sum(isinstance(v, dict) for v in dict.values(described))  # the values held
    assert made == MAX_ITEMS < len(described)
    assert plain["..."] == f"{len(described) - MAX_ITEMS} more"
    want = {n: w.describe() for n, w in weights.items()}
    assert described == want and want == described and (described != want) is False
    assert json.dumps(described) == json.dumps(want)
    assert dict(described) == {**described} == described.copy() == want
    assert list(described.items()) == list(want.items())
    assert list(described.values()) == list(want.values())
    again = pickle.loads(pickle.dumps(described))
    assert type(again) is dict and again == want
    assert copy.deepcopy(described) == want and repr(described) == repr(want)
    assert described.get("nope") is None and described.get("nope", 3) == 3
    name = next(iter(want))
    assert described.get(name) == described[name] == want[name]
    assert described.setdefault(name, {}) == want[name]
    assert described.pop(name) == want[name] and name not in described
    assert described.popitem() == list(want.items())[-1]
    assert (described | {"x": 1})["x"] == 1 and len(described) == len(want) - 2


def _no_load(name: str) -> Any:
    raise AssertionError(f"grouping FP8 weights reads no values ({name})")


def test_checks_once_per_family_find_each_wrong_scale() -> None:
    # four experts of one shape, the third with a scale for another block size
    stored: dict[str, Any] = {}
    for e in range(4):
        m = f"model.layers.1.mlp.experts.{e}.down_proj"
        stored[f"{m}.weight"] = Part(f"{m}.weight", "float8_e4m3fn", [256, 384])
        stored[f"{m}.weight_scale_inv"] = Part(f"{m}.weight_scale_inv", "float32", [2, 3])
    bad = "model.layers.1.mlp.experts.2.down_proj"
    stored[f"{bad}.weight_scale_inv"] = Part(f"{bad}.weight_scale_inv", "float32", [4, 5])
    parts = StoredParts.of(stored)
    q = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    grouped = fp8_block.group(parts, q, _no_load)
    assert len(grouped) == 4 and len(grouped.families) == 1
    found = check_config(q, grouped, grouped.names, parts)
    assert [(f["rule"], f["module"]) for f in found] == [(RULE_PARTS, bad)]
    assert "needs [2, 3]" in found[0]["message"]
    # the same shapes as plain records (a generic mapping) group alike
    records = {k: TensorRecord(k, v.dtype, tuple(v.shape), 0, "f") for k, v in stored.items()}
    again = fp8_block.group(records, q, _no_load)
    assert again.names == grouped.names and list(again.parts) == list(grouped.parts)


class _Source:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def read_values_for(self, name: str) -> Any:
        self.asked.append(name)
        return lambda: f"values of {name}"


def test_table_column_of_loader_sources() -> None:
    source = _Source()
    table = RecordTable.from_columns(
        ["a", "b"], ["x/y", "float32"], [[2, 3], [4]], [6, 16], ["f", "f"], [None, 8],
        [source, None],
    )  # fmt: skip
    assert source.asked == []  # asked when a record is made
    assert table[0].read_values is not None and table[0].read_values() == "values of a"
    assert table[1].read_values is None and table[0].shape == (2, 3)
    taken = table.take([1, 0])
    assert [r.name for r in taken] == ["b", "a"] and taken[1].read_values() == "values of a"
    assert source.asked == ["a"]  # a record is made once
    other = RecordTable.from_columns(["c"], ["i8"], [[1]], [1], ["g"], [0], [source])
    both = RecordTable.concat([table, other])
    assert [r.read_values() for r in both if r.read_values is not None] == [
        "values of a",
        "values of c",
    ]


def test_a_listing_of_records_gives_the_same_view(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A base listing made of records (a reader that builds them) is grouped alike."""
    from ckpt_explorer.readers.quantized import folder as quantized_folder
    from ckpt_explorer.view import CheckpointView

    columns = open_checkpoint(folder)
    open_sharded = sharded_index.open_sharded

    def as_records(path: Any, detection: Any) -> CheckpointView:
        view = open_sharded(path, detection)
        view.tensors = RecordTable.from_records(list(view.tensors))
        return view

    monkeypatch.setattr(quantized_folder.sharded_index, "open_sharded", as_records)
    records = open_checkpoint(folder)
    assert not records.tensors.columnar and columns.tensors.columnar
    assert list(records.tensors) == list(columns.tensors)  # names, dtypes, shapes, sizes, files
    name = next(r.name for r in records.tensors if r.dtype == FP8)
    assert records.load(name).numpy().tobytes() == columns.load(name).numpy().tobytes()  # NaN too
