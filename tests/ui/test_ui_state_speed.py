"""What keeps the dashboard fast and honest, checked without a browser: a large tensor's detail
from a sample first and exact after, views and tables shared until a file changes, the kept
filter equal to the plain one, natural sort on the server, paths offered as they appear, a
conversion cancelled in the middle leaving nothing."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from conftest import BIG_TENSOR
from safetensors.torch import save_file

from ckpt_explorer.ui.components.sorted_table import Table, column_ranks
from ckpt_explorer.ui.state import AppState
from ckpt_explorer.ui.tables import filter_weights
from ckpt_explorer.ui.tensor_stats import HIST_SAMPLE, tensor_stats
from ckpt_explorer.ui.view_cache import open_view


def test_a_large_tensor_is_shown_from_a_sample_then_exactly(ui_root: Path) -> None:
    b = AppState(ui_root).browse
    assert b.open("big_tensor/model.safetensors")
    seen: list[Any] = []
    b.param.watch(lambda e: seen.append(e.new), "detail")
    b.select("huge.weight", wait=True)
    details = [d for d in seen if d is not None]
    assert [d.exact for d in details] == [False, True]
    first, last = details
    assert first.sampled == HIST_SAMPLE and first.stats["numel"] == BIG_TENSOR
    x = (torch.arange(BIG_TENSOR, dtype=torch.int64) % 997).to(torch.float32)
    truth = tensor_stats(x)  # integers: every sum exact, whatever the order
    assert last.stats == truth and last.hist_counts == first.hist_counts
    assert b.detail is last and not b.detail_loading and b.detail_progress == 1.0
    assert abs(first.stats["mean"] - truth["mean"]) < 0.05 * truth["mean"]  # a fair sample
    b.select("small.bias", wait=True)
    seen.clear()
    b.select("huge.weight")  # seen before: back at once, exact, no job
    assert b.detail is last and not b.detail_loading and seen == [last]


def test_small_tensors_are_exact_at_once(ui_root: Path) -> None:
    b = AppState(ui_root).browse
    assert b.open("hf_gpt2")
    seen: list[Any] = []
    b.param.watch(lambda e: seen.append(e.new), "detail")
    name = b.view.tensors[0].name
    b.select(name, wait=True)
    assert [d.exact for d in seen if d is not None] == [True]
    assert b.detail.stats == tensor_stats(b.view.load(name))


def test_views_and_tables_are_shared_until_a_file_changes(tmp_path: Path) -> None:
    folder = tmp_path / "root" / "ckpt"
    folder.mkdir(parents=True)
    save_file({"a": torch.zeros(4), "b": torch.ones(2)}, str(folder / "model.safetensors"))
    one, two = AppState(tmp_path / "root").browse, AppState(tmp_path / "root").browse
    assert one.open("ckpt") and two.open("ckpt")
    assert one.view is two.view and one.frame("weights") is two.frame("weights")
    assert one.module_index() is two.module_index()
    save_file({"a": torch.zeros(5)}, str(folder / "model.safetensors"))
    st = os.stat(folder / "model.safetensors")
    os.utime(folder / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert two.open("ckpt")
    assert two.view is not one.view and [r.name for r in two.view.tensors] == ["a"]
    assert open_view(folder) is two.view


def test_kept_filter_equals_the_plain_one_with_folded_states(ui_root: Path) -> None:
    b = AppState(ui_root).browse
    assert b.open("demo/resumed_from")
    weights, fast = b.frame("weights"), b.weight_filter()
    queries = [
        ("layers.0.", "", False),
        ("EXP_AVG", "", False),
        ("optimizer/embed_tokens.weight → ", "", True),
        ("optimizer/", "", True),
        ("modeling/embed_tokens.weight", "", True),
        ("", "optimizer", False),
        ("state.3.", "optim", False),
        ("no such", "", False),
    ]
    for q in queries:
        assert list(fast.rows(*q)) == list(filter_weights(weights, *q).index), q
        assert fast(weights, *q).equals(filter_weights(weights, *q)), q


def test_server_side_sort_is_natural_with_missing_last() -> None:
    names = ["layers.10.w", "layers.2.w", None, "Layers.1.w", "layers.9.w"]
    df = pd.DataFrame({"name": names, "x": [3.0, math.nan, 1.0, 2.0, 0.5]})
    assert list(column_ranks(df["name"])) == [3, 1, 5, 0, 2]  # missing: after every row
    t = Table(df, pagination="remote")
    t.sorters = [{"field": "name", "dir": "asc"}]
    assert list(t._sort_df(df)["name"].fillna("-")) == [
        "Layers.1.w",
        "layers.2.w",
        "layers.9.w",
        "layers.10.w",
        "-",
    ]
    t.sorters = [{"field": "name", "dir": "desc"}]
    assert list(t._sort_df(df)["name"].fillna("-")) == [
        "layers.10.w",
        "layers.9.w",
        "layers.2.w",
        "Layers.1.w",
        "-",
    ]
    t.sorters = [{"field": "x", "dir": "desc"}]
    assert list(t._sort_df(df)["x"].fillna(-1)) == [3.0, 2.0, 1.0, 0.5, -1]
    part = df.iloc[[0, 1, 4]]  # a filtered view sorts by the same ranks
    t.sorters = [{"field": "name", "dir": "asc"}]
    assert list(t._sort_df(part)["name"]) == ["layers.2.w", "layers.9.w", "layers.10.w"]


def test_paths_are_offered_as_they_appear(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    app = AppState(root)
    assert app.candidates() == ["a"]
    (root / "b").mkdir()
    app.refresh_paths()  # listed a moment ago: not again yet
    assert app.paths == ["a"]
    app.refresh_paths(0)
    assert app.paths == ["a", "b"]
    deep = root / "b" / "c" / "d" / "e" / "f"
    deep.mkdir(parents=True)  # deeper than the listing goes
    app.remember("b/c/d/e/f")
    app.remember("no/such/path")
    assert app.paths[-1] == "b/c/d/e/f" and "no/such/path" not in app.paths
    app.refresh_paths(0)
    assert "b/c/d/e/f" in app.paths  # remembered paths outlive a new listing


def test_a_conversion_cancelled_in_the_middle_leaves_nothing(
    ui_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = AppState(ui_root).convert
    out = f"cancelled-{os.getpid()}"
    c.param.update(source="big_a", destination=out, target="safetensors", dtype="bf16")
    assert c.make_plan(), c.error
    log_line = type(c).add_log

    def cancel_on_first_line(self: Any, line: str) -> None:
        log_line(self, line)
        self.cancel()  # the first progress event: the job is under way

    monkeypatch.setattr(type(c), "add_log", cancel_on_first_line)
    c.run(wait=True)
    assert c.message.startswith("cancelled — nothing was written"), c.message
    assert c.error == "" and c.result is None and not c.running
    assert not (ui_root / out).exists()
    leftovers = [p for p in ui_root.iterdir() if p.name.startswith(f".{out}") or out in p.name]
    assert leftovers == []
    shutil.rmtree(ui_root / out, ignore_errors=True)


def test_one_tensor_over_the_timeline(ui_root: Path, tmp_path: Path) -> None:
    """The Timeline's tensor block: the run's model tensors offered once it is built, the
    distribution computed in the background, a new build clearing the last one."""
    app = AppState(ui_root)
    st, steps = app.timeline, app.steps
    st.run_dir = "demo/run"
    st.build(wait=True, cache_dir=tmp_path / "cache")
    assert st.error == "" and not st.running
    assert "modeling/embed_tokens.weight" in steps.names
    assert not any("exp_avg" in n for n in steps.names)  # model tensors, not moments
    steps.tensor = "modeling/layers.0.self_attn.in_proj_weight"
    steps.run(wait=True)
    d = steps.result
    assert steps.error == "" and d is not None and d.steps == [2, 4, 6]
    assert steps.message.endswith("3 checkpoints")
    st.build(wait=True, cache_dir=tmp_path / "cache")
    assert steps.result is None and steps.tensor == "modeling/layers.0.self_attn.in_proj_weight"
    steps.tensor = "no.such.tensor"
    steps.run(wait=True)
    assert "no.such.tensor" in steps.error and steps.result is None
