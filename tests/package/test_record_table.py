"""A view's records kept as columns: the same records as before, made only when asked for."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from ckpt_explorer import open_checkpoint
from ckpt_explorer.readers.safetensors_file import safetensors_records
from ckpt_explorer.record_table import RecordTable
from ckpt_explorer.types import TensorRecord
from ckpt_explorer.view import unique_numel

ARRAYS = {
    "b.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
    "a.bias": np.arange(3, dtype=np.float16),
    "c.scalar": np.array(7, dtype=np.int64),
    "d.empty": np.zeros((0, 4), dtype=np.uint8),
}


@pytest.fixture
def shard(tmp_path: Path) -> Path:
    path = tmp_path / "m.safetensors"
    save_file(ARRAYS, str(path))
    return path


def _expected(path: Path) -> list[TensorRecord]:
    """What the reader listed before (one TensorRecord per tensor, in data order)."""
    from ckpt_explorer.io.safetensors_header import DTYPES, read_header

    header = read_header(path)
    out = []
    for e in sorted(header.entries, key=lambda e: e.begin):
        out.append(
            TensorRecord(
                e.name,
                DTYPES[e.dtype][0],
                e.shape,
                e.end - e.begin,
                "m",
                header.data_start + e.begin,
            )
        )
    return out


def _untouched(table: RecordTable) -> bool:
    return table._records is None and not table._made


def test_table_lists_what_records_did_without_making_them(shard: Path) -> None:
    table, _ = safetensors_records(shard, "m")
    expected = _expected(shard)
    assert len(table) == len(expected) == 4
    assert list(table.column("name")) == [r.name for r in expected]
    assert [tuple(s) for s in table.column("shape")] == [r.shape for r in expected]
    assert table.nbytes_total() == sum(r.nbytes for r in expected) == 24 + 6 + 8
    assert table.element_total() == 6 + 3 + 1 + 0
    assert not table.aliasing_possible()
    assert _untouched(table)  # none of the above made a record
    assert table == tuple(expected) and tuple(expected) == table.records()


def test_records_are_made_once_and_keep_their_identity(shard: Path) -> None:
    table, _ = safetensors_records(shard, "m")
    second = table[1]
    assert table[1] is second and table[-3] is second
    assert table[:2][1] is second and table._records is None
    every = list(table)
    assert every[1] is second and next(iter(table)) is every[0]  # the same objects every pass
    with pytest.raises(IndexError):
        table[4]
    assert (
        isinstance(table[0], TensorRecord) and dataclasses.replace(table[0], name="x").name == "x"
    )


def test_records_load_their_values(shard: Path) -> None:
    view = open_checkpoint(shard)
    assert isinstance(view.tensors, RecordTable)
    for name, array in ARRAYS.items():
        got = view.load(name)
        assert torch.equal(got, torch.from_numpy(array.copy()))
    assert view.record("b.weight").read_values is not None
    assert "a.bias" in view and "nope" not in view
    assert view.names() == [r.name for r in _expected(shard)]


def test_take_and_concat_reorder_columns_lazily(shard: Path, tmp_path: Path) -> None:
    other = tmp_path / "n.safetensors"
    save_file({"z": np.ones(2, dtype=np.float64)}, str(other))
    a, _ = safetensors_records(shard, "m")
    b, _ = safetensors_records(other, "n")
    joined = RecordTable.concat([a, b])
    assert [r.name for r in joined] == [*a.column("name"), "z"]
    c, _ = safetensors_records(shard, "m")
    d, _ = safetensors_records(other, "n")
    picked = RecordTable.concat([c, d]).take([4, 0, 2])
    assert _untouched(picked)
    assert list(picked.column("name")) == ["z", a[0].name, a[2].name]
    assert list(picked.column("file")) == ["n", "m", "m"]
    assert picked.take([2, 0]).column("name") == [a[2].name, "z"]
    assert [r.name for r in picked] == ["z", a[0].name, a[2].name]
    assert torch.equal(picked[0].read_values(), torch.ones(2, dtype=torch.float64))


def test_a_table_of_records_behaves_as_their_tuple() -> None:
    records = (
        TensorRecord("x", "float32", (2,), 8, "f", 0, storage_key="0"),
        TensorRecord("y", "float32", (2,), 8, "f", 0, storage_key="0"),
    )
    table = RecordTable.from_records(records)
    assert RecordTable.from_records(table) is table
    assert table == records and table.records() is not None and len(table) == 2
    assert table + (records[0],) == (*records, records[0])  # noqa: RUF005 (the operator)
    assert (records[1],) + table == (records[1], *records)  # noqa: RUF005
    assert table.aliasing_possible() and table.column("storage_key") == ["0", "0"]
    assert unique_numel(table) == 2  # the second name aliases the first storage view
    assert hash(table) == hash(records) and repr(table) == "RecordTable(2 records)"


def test_state_map_and_validate_keep_a_models_table_unmade(tmp_path: Path) -> None:
    from ckpt_explorer.validate.parts import collect

    save_file(ARRAYS, str(tmp_path / "model.safetensors"))
    view = open_checkpoint(tmp_path / "model.safetensors")
    table = view.tensors
    assert view.state_map.model is table  # every tensor is the model's: the view's own table
    (part,) = collect(view).models
    assert part.records is table
    assert _untouched(table)  # deciding the parts made no record


def test_a_models_subset_is_the_tables_rows(shard: Path) -> None:
    from types import SimpleNamespace

    from ckpt_explorer.readers.state_map import _model

    table, _ = safetensors_records(shard, "m")
    expected = _expected(shard)
    view = SimpleNamespace(tensors=table, traits=SimpleNamespace(module_prefix=""))
    model = _model(view, {"a.bias", "d.empty"}, False)  # type: ignore[arg-type]
    assert _untouched(table) and len(model) == 2
    assert list(model) == [r for r in expected if r.name in ("b.weight", "c.scalar")]
    view.traits.module_prefix = "c."
    assert [r.name for r in _model(view, set(), False)] == ["c.scalar"]  # type: ignore[arg-type]
