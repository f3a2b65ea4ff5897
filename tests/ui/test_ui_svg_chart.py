"""The Overview's and Weight map's static charts, and the tables they are drawn from, read
from the record table's columns without making its records."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.natural import natural_sorted
from ckpt_explorer.record_table import RecordTable
from ckpt_explorer.ui import tables
from ckpt_explorer.ui.components.svg_chart import bars, donut


def test_donut_slices_cover_the_ring_by_share() -> None:
    out = donut(["F8", "F32", "BF16"], [600, 300, 100], ["a <b>", "c", "d"], ["#111", "#222"])
    assert out.count("<path class='mark'") == 3
    assert "F8 · 60.0%" in out and "F32 · 30.0%" in out and "BF16 · 10.0%" in out
    assert "<title>a &lt;b&gt;</title>" in out  # hover texts escaped
    big, small = re.findall(r"A[\d.]+,[\d.]+ 0 (\d) 1", out)[:2]
    assert (big, small) == ("1", "0")  # the slice over half the ring takes the long arc
    fills = re.findall(r"fill='(#\d+)'>", out)
    assert fills == ["#111", "#222", "#111"]  # colours cycle


def test_donut_of_one_dtype_is_a_full_ring() -> None:
    out = donut(["BF16"], [5], ["x"], ["#111"])
    assert "<circle class='mark'" in out and "<path" not in out and "100.0%" in out


def test_bars_are_as_tall_as_their_values_in_the_given_order() -> None:
    out = bars(["1", "2", "3"], [10.0, 40.0, 20.0], ["f1", "f2", "f3"], "#0ea5e9", unit="MiB")
    heights = [float(h) for h in re.findall(r"<rect class='mark'[^>]* height='([\d.]+)'", out)]
    assert len(heights) == 3 and heights[1] == max(heights)
    assert heights[0] * 4 == heights[1] and heights[2] * 2 == heights[1]
    assert [t for t in re.findall(r"<title>(.*?)</title>", out)] == ["f1", "f2", "f3"]
    assert ">MiB</text>" in out and ">40</text>" in out  # axis up to the largest value
    assert out.count("fill='#374151'") == 3  # a label under each bar
    hidden = bars(["1", "2"], [1.0, 2.0], ["a", "b"], "#000", show_labels=False)
    assert "fill='#374151'" not in hidden and ">0.5</text>" in hidden


def test_tables_read_columns_and_match_the_records(ui_root: Path) -> None:
    view = open_checkpoint(ui_root / "hf_gpt2")
    assert isinstance(view.tensors, RecordTable)
    dtypes = tables.dtype_breakdown(view)
    files = tables.files_frame(view)
    assert view.tensors._records is None  # the Overview's tables made no record
    weights = tables.weight_map(view)
    records = list(view.tensors)
    assert list(weights["name"]) == natural_sorted([r.name for r in records])
    by_name = {r.name: r for r in records}
    for row in weights.itertuples():
        r = by_name[row.name]
        assert (row.dtype, row.numel, row.bytes, row.file) == (r.dtype, r.numel, r.nbytes, r.file)
        assert row.shape == tables.shape_text(r.shape)
    for row in dtypes.itertuples():
        mine = [r for r in records if r.dtype == row.dtype]
        assert row.tensors == len(mine)
        assert row.numel == sum(r.numel for r in mine)
        assert row.bytes == sum(r.nbytes for r in mine)
    for row in files.itertuples():
        assert row.tensors == sum(r.file == row.file for r in records)
        assert row.tensor_bytes == sum(r.nbytes for r in records if r.file == row.file)


def test_many_shards_are_one_line_each_largest_first_without_overlap() -> None:
    """42 shards (issue 35: their names smeared into one another under upright bars): one
    bar per line, sorted by size, every label on its own line, the box scrolls."""
    from ckpt_explorer.ui.components.svg_chart import ROW, hbars

    sizes = [float((i * 37) % 42 + 1) for i in range(42)]
    labels = [f"{i + 1:05d}" for i in range(42)]
    out = hbars(labels, sizes, [f"shard {lab}" for lab in labels], "#0ea5e9", unit="MiB")
    ys = [
        float(y)
        for y in re.findall(r"<text x='[\d.]+' y='([\d.]+)' text-anchor='end' fill='#374151'", out)
    ]
    assert len(ys) == 42 and all(b - a >= ROW for a, b in itertools.pairwise(ys))  # no overlap
    drawn = re.findall(r"fill='#374151'>(\d+)</text>", out)
    by_label = dict(zip(labels, sizes, strict=True))
    assert [by_label[d] for d in drawn] == sorted(sizes, reverse=True)  # largest first
    widths = [float(w) for w in re.findall(r"<rect class='mark'[^>]* width='([\d.]+)'", out)]
    assert widths == sorted(widths, reverse=True) and widths[0] > 0
    assert "overflow-y:auto" in out and ">0</text>" in out  # scrolls; the axis starts at 0
    before = bars(labels, sizes, labels, "#000")  # the upright chart's labels: 42 in 360 px
    xs = [
        float(x)
        for x in re.findall(
            r"<text x='([\d.]+)' y='[\d.]+' text-anchor='end' fill='#374151'", before
        )
    ]
    assert min(b - a for a, b in itertools.pairwise(xs)) < 12  # why many shards take hbars
