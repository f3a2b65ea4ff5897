"""Issue 24, the logic behind what a person sees: natural order, exact module filters, the
one number rule, honest convert words, the URL, the demo's timeline, stale state cleared."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from safetensors.torch import save_file

from ckpt_explorer.natural import natural_if_string_ordered, natural_key, natural_sorted
from ckpt_explorer.ui.numbers import fmt_bytes, fmt_number, fmt_size_typed, plural
from ckpt_explorer.ui.state import AppState
from ckpt_explorer.ui.tables import filter_weights, key_values, short_labels

PLANTED = {"eps": 1e-08, "lr": 5e-07, "max_norm": 1.5e12}  # as conftest plants them


def test_natural_order() -> None:
    names = ["experts.10.w", "experts.1.w", "experts.0.w", "experts.2.w", "layers.9", "layers.10"]
    assert natural_sorted(names) == [
        "experts.0.w",
        "experts.1.w",
        "experts.2.w",
        "experts.10.w",
        "layers.9",
        "layers.10",
    ]
    assert natural_key("a01") != natural_key("a1")  # a total order, never equal keys
    assert natural_if_string_ordered(sorted(names)) == natural_sorted(names)
    model_order = ["embed", "layers.0", "layers.1", "norm", "head"]  # kept: not text-sorted
    assert natural_if_string_ordered(model_order) == model_order


def test_convert_packs_shards_in_natural_order(tmp_path: Path) -> None:
    """A safetensors file keeps names sorted as text; its shards hold layers 0, 1, 2 …"""
    from ckpt_explorer.convert import plan_conversion

    tensors = {f"model.layers.{i}.weight": torch.zeros(256) for i in range(12)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    plan = plan_conversion(
        tmp_path / "model.safetensors", tmp_path / "out", to="hf", max_shard_size="2KiB"
    )
    packed = [t.name for f in plan.files for t in f.tensors]
    assert packed == [f"model.layers.{i}.weight" for i in range(12)]
    assert [t.name for t in plan.files[0].tensors] == [
        "model.layers.0.weight",
        "model.layers.1.weight",
    ]


def test_numbers_and_words() -> None:
    assert [fmt_number(x) for x in (1e-08, 5e-07, 0.0, 1.5e12, math.nan)] == [
        "1e-08",
        "5e-07",
        "0",
        "1.5e+12",
        "NaN",
    ]
    assert fmt_bytes(252 * 2**20) == "252 MiB" and fmt_bytes(80e9) == "74.5 GiB"
    assert fmt_bytes(12) == "12 B"
    assert fmt_size_typed("80GB", int(80e9)) == "80 GB (74.5 GiB)"  # as typed: decimal
    assert fmt_size_typed("80GiB", 80 * 2**30) == "80 GiB"
    assert plural(1, "pair") == "1 pair" and plural(2, "error") == "2 errors"
    assert plural(1, "anomaly", "anomalies") == "1 anomaly" and plural(1024, "element").startswith(
        "1,024"
    )
    rows = key_values("scheduler", {"base_lrs": [0.0003], "last_epoch": 6, "x": None, "y": False})
    assert rows == [
        ("scheduler.base_lrs", "[0.0003]"),
        ("scheduler.last_epoch", "6"),
        ("scheduler.x", "null"),
        ("scheduler.y", "false"),
    ]
    shards = [f"model-{i:05d}-of-00020.safetensors" for i in range(1, 21)]
    assert short_labels(shards)[:3] == ["00001", "00002", "00003"]


def test_module_filter_is_an_exact_prefix(ui_root: Path) -> None:
    """Layer 2 of the module tree is layer 2 only (100 tensors), never layers 20–29."""
    b = AppState(ui_root).browse
    assert b.open("big_a")
    index = b.module_index()
    weights = b.frame("weights")
    layers = index.children("model.layers.")
    f = layers[2].filter
    assert f == "model.layers.2." and layers[2].tensors == 100
    b.filter_module(f)
    shown = filter_weights(weights, b.name_filter, prefix=b.name_prefix)
    assert len(shown) == 100 and shown["name"].str.startswith("model.layers.2.").all()
    assert len(filter_weights(weights, "model.layers.2")) == 1100  # the typed substring
    assert [n.label for n in layers[:12]] == [str(i) for i in range(12)]  # natural order
    fast = b.weight_filter()
    for query in (("model.layers.2.", "", True), ("LAYERS.2", "", False), ("", "00003", False)):
        assert list(fast.rows(*query)) == list(filter_weights(weights, *query).index), query
    files = b.frame("files")["file"]
    assert list(files) == natural_sorted(files)


def test_filter_change_clears_the_tensor_detail(ui_root: Path) -> None:
    b = AppState(ui_root).browse
    assert b.open("hf_gpt2")
    name = b.view.tensors[0].name
    b.select(name, wait=True)
    assert b.detail is not None and b.selected == name
    b.filter_text(name="h.1.")
    assert b.selected == "" and b.detail is None


def test_url_holds_the_view(ui_root: Path) -> None:
    from ckpt_explorer.ui.url_state import apply_query, query_of, session_query

    app = AppState(ui_root)
    q = {
        "tab": "Weight map",
        "ckpt": "big_a",
        "filter": "model.layers.2.",
        "module": "1",
        "tensor": "model.layers.2.block0.w0.weight",
    }
    apply_query(app, session_query({k: [v.encode()] for k, v in q.items()}))
    assert app.active == "Weight map" and app.browse.path == "big_a"
    assert app.browse.name_prefix and app.browse.selected == q["tensor"]
    assert query_of(app) == q
    apply_query(app, {"ckpt": "no/such/path"})  # an error shown, the view kept
    assert app.browse.error and app.browse.path == "big_a"


def test_convert_words_name_the_controls(ui_root: Path) -> None:
    from ckpt_explorer.ui.components.convert import byte_copy_card, verified_words

    c = AppState(ui_root).convert
    c.param.update(source="demo/resumed_from", target="safetensors", destination="x.safetensors")
    assert not c.make_plan()
    assert "--" not in c.error and "“Model weights only” box" in c.error
    assert c.result is None
    assert byte_copy_card(0, 100, "bf16") == ("Byte copy", "none", "every tensor cast to bf16")
    assert byte_copy_card(100, 100, None)[1:] == ("100%", "copied byte for byte")
    words = verified_words("bf16", 0.0078125, "out")
    assert "cast to bf16" in words and "0.0078125" in words and "bit for bit" in words
    assert "its source cast" not in verified_words(None, None, "out")


def test_cast_conversion_reports_its_difference(ui_root: Path) -> None:
    c = AppState(ui_root).convert
    c.param.update(
        source="hf_gpt2", target="safetensors", destination="gpt2-bf16.safetensors", dtype="bf16"
    )
    assert c.make_plan(), c.error
    c.run(wait=True)
    assert c.result is not None and c.result.verified, c.error
    assert c.cast_max_diff is not None and 0 < c.cast_max_diff < 0.1
    assert any("cast to bf16" in line for line in c.log)


def test_demo_timeline(ui_root: Path, tmp_path: Path) -> None:
    """The demo's run folder is found beside the open state and builds a timeline."""
    from ckpt_explorer.ui.timeline_state import default_run_dir, run_beside, summary_line

    app = AppState(ui_root)
    assert app.browse.open("demo/resumed_from")
    run = run_beside(app.guard.root, default_run_dir(app.browse.path))
    assert run == "demo/run"
    app.timeline.run_dir = run
    app.timeline.build(wait=True, cache_dir=tmp_path)
    t = app.timeline.timeline
    assert t is not None, app.timeline.error
    assert summary_line(t).startswith("3 checkpoints, 2 pairs, 0 anomalies")


def test_equal_checkpoints_say_all_identical(ui_root: Path) -> None:
    from ckpt_explorer.ui.components.compare import CompareView

    app = AppState(ui_root)
    app.compare.param.update(a="demo/run/step-2", b="demo/run/step-2")
    app.compare.run(wait=True)
    assert app.compare.result is not None
    view = CompareView(app)
    alerts = [o for o in view._results if "all-identical" in (o.css_classes or [])]
    assert alerts and "identical" in alerts[0].object
    assert not any("Per layer" in str(getattr(o, "title", "")) for o in view._results)


def test_planted_values_are_numbers_in_the_groups_table(ui_root: Path) -> None:
    """Numbers stay numbers (NaN too, never the text "nan") until the page draws them."""
    b = AppState(ui_root).browse
    assert b.open("planted/optim.pt"), b.error
    groups = b.frame("groups")
    for key, truth in PLANTED.items():
        assert groups[key].iloc[0] == truth, key
    assert math.isnan(groups["odd"].iloc[0])


def test_ab_view_of_a_compare_row(ui_root: Path) -> None:
    """A Compare row opens its tensor in A and B: common bins, one colour scale, A − B."""
    from ckpt_explorer.ui.ab_detail import ab_detail

    a = torch.arange(12.0).reshape(3, 4)
    d = ab_detail("w", a, a + 0.5)
    assert d.max_abs == 0.5 and len(d.counts_a) == len(d.counts_b) == len(d.edges) - 1
    assert d.zmax == 11.5 and d.slice_diff is not None and len(d.row_norms) == 3
    assert ab_detail("w", a, torch.zeros(2)).slice_diff is None  # shapes differ: no A − B
    c = AppState(ui_root).compare
    c.param.update(a="demo/resumed_from", b="demo/after_resume")
    c.select("modeling/embed_tokens.weight", wait=True)
    assert c.ab is not None and c.ab_error == "" and c.ab.max_abs > 0
    c.select("no.such.tensor", wait=True)
    assert c.ab is None and "no.such.tensor" in c.ab_error
