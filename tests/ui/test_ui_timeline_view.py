"""The Timeline view without a browser: what it shows is the engine's Timeline, as it is.

Runs are the timeline fixture's real transformers Trainer runs (tests/fixture_makers/
timeline_maker.py): ``hf_clean`` and ``hf_no_scheduler`` (resumed from a checkpoint whose
scheduler.pt was lost: the LR restarts and the moments reset at step 8).
"""

from __future__ import annotations

import html
import math
import shutil
import time
from pathlib import Path
from typing import Any

import panel as pn
import pytest

from ckpt_explorer.timeline import build_timeline
from ckpt_explorer.ui.components.timeline_view import TimelineView, anomaly_frame
from ckpt_explorer.ui.state import AppState
from ckpt_explorer.ui.timeline_state import default_run_dir

FAULTY = "hf_no_scheduler"


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default summary cache under this test's folder (never the user's ~/.cache)."""
    monkeypatch.setenv("CKPT_EXPLORER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "timeline"


@pytest.fixture(scope="module")
def runs(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    return real_checkpoints("timeline")  # type: ignore[no-any-return]


def objects(viewable: Any) -> list[Any]:
    """Every Panel object under ``viewable`` (Viewers opened)."""
    out: list[Any] = []
    stack = [viewable]
    while stack:
        obj = stack.pop()
        if isinstance(obj, pn.viewable.Viewer):
            obj = obj.__panel__()
        out.append(obj)
        if isinstance(obj, pn.layout.ListLike | pn.layout.Card):
            stack.extend(obj.objects)
    return out


def built(root: Path, open_path: str) -> tuple[AppState, TimelineView]:
    """The app with ``open_path`` open, its Timeline view, and the default run folder built."""
    app = AppState(root)
    assert app.browse.open(open_path), app.browse.error
    view = TimelineView(app=app)
    app.timeline.build(wait=True)
    assert not app.timeline.error, app.timeline.error
    return app, view


TITLES = ("Update ratio", "Learning rate", "Optimizer moment norms", "Step counters")


def figures(view: TimelineView) -> dict[str, Any]:
    """The view's plotly figures by the start of their section's title (TITLES)."""
    out = {}
    for card in (o for o in objects(view) if isinstance(o, pn.Card)):
        for o in card.objects:
            if isinstance(o, pn.pane.Plotly):
                out[next(t for t in TITLES if card.title.startswith(t))] = o.object
    return out


def marks(fig: Any) -> dict[float, str]:
    """x -> hover text of the figure's anomaly annotations."""
    return {
        a.x: a.hovertext for a in fig.layout.annotations if (a.name or "").startswith("anomaly")
    }


def test_heatmap_cells_are_the_pair_layer_ratios(runs: tuple[Path, dict[str, Any]]) -> None:
    """Each cell is the engine's ‖Δ‖/‖W‖ of that layer and pair (log10 as colour, the ratio
    on hover), for a Timeline built independently of the view."""
    root, _ = runs
    app, view = built(root, f"{FAULTY}/checkpoint-4")
    assert app.timeline.run_dir == FAULTY
    ref = build_timeline(root / FAULTY)  # no cache: the engine's own figures
    heat = figures(view)["Update ratio"].data[0]
    layers = list(heat.y)
    assert set(layers) == {k for p in ref.pairs for k in p.layers} and len(layers) >= 4
    assert list(heat.x) == list(range(len(ref.pairs))) == list(range(5))
    checked = 0
    for i, layer in enumerate(layers):
        for j, pair in enumerate(ref.pairs):
            r = pair.layers[layer]
            assert r > 0, (layer, pair.step_b)  # every layer of a training run moves
            assert heat.z[i][j] == pytest.approx(math.log10(r), rel=1e-9, abs=1e-12)
            assert float(heat.text[i][j]) == pytest.approx(r, rel=1e-5)
            assert heat.customdata[i][j] == f"{pair.step_a} → {pair.step_b}"
            checked += 1
    assert checked == len(layers) * 5
    # the ticks name the step each column's update leads to
    assert list(view.heatmap.object.layout.xaxis.ticktext) == ["4", "6", "8", "10", "12"]


def test_anomalies_are_marked_and_listed(runs: tuple[Path, dict[str, Any]]) -> None:
    """The lost scheduler's anomalies: at step 8 on the LR, moments and counter plots, on the
    heatmap's column of the update into step 8, and in the table, message for message."""
    root, manifest = runs
    app, view = built(root, f"{FAULTY}/checkpoint-12")
    t = app.timeline.timeline
    found = {(a.step, a.kind) for a in t.anomalies}
    assert {tuple(e) for e in manifest["cases"][FAULTY]["expected"]} <= found
    steps = {a.step for a in t.anomalies if a.step is not None}
    figs = figures(view)
    for title in TITLES[1:]:
        shown = marks(figs[title])
        assert set(shown) == steps, title
        for a in t.anomalies:
            assert html.escape(a.message) in shown[a.step], (title, a.kind)
    heat = marks(figs["Update ratio"])
    columns = {j: p.step_b for j, p in enumerate(t.pairs) if p.step_b in steps}
    assert set(heat) == set(columns) and columns[2] == 8
    for j, step in columns.items():
        assert all(html.escape(a.message) in heat[j] for a in t.anomalies if a.step == step)
    tables = [o.value for o in objects(view) if isinstance(o, pn.widgets.Tabulator)]
    listed = next(df for df in tables if "kind" in df.columns)
    assert list(zip(listed["step"], listed["kind"], listed["message"], strict=True)) == [
        (a.step, a.kind, a.message) for a in t.anomalies
    ]
    assert list(anomaly_frame(t)["severity"]) == [a.severity for a in t.anomalies]
    # the LR the plot draws is each checkpoint's group LR: back to the peak at the restart
    lr = figs["Learning rate"].data[0]
    assert list(lr.x) == [c.step for c in t.checkpoints]
    assert list(lr.y) == [c.groups[0]["lr"] for c in t.checkpoints]
    assert lr.y[3] > lr.y[2]  # step 8's LR above step 6's: the restart is visible


def test_clean_run_marks_nothing(runs: tuple[Path, dict[str, Any]]) -> None:
    root, _ = runs
    app, view = built(root, "hf_clean/checkpoint-2")
    assert app.timeline.timeline.anomalies == []
    figs = figures(view)
    assert set(figs) == set(TITLES)
    for title, fig in figs.items():
        assert marks(fig) == {}, title
        assert not fig.layout.shapes, title
    alerts = [o.object for o in objects(view) if isinstance(o, pn.pane.Alert)]
    assert any("No anomaly found" in str(a) for a in alerts)


def test_click_and_button_open_compare_on_the_pair(runs: tuple[Path, dict[str, Any]]) -> None:
    """A heatmap click (Plotly's click event as Panel delivers it: x is the column) sets
    Compare's A and B to that pair, shows Compare and runs the diff; the selector and button
    do the same for another pair."""
    root, _ = runs
    app, view = built(root, f"{FAULTY}/checkpoint-2")
    assert view.heatmap is not None
    assert app.timeline.pair == view._pair.value == 2  # preselected: the pair into step 8
    view.heatmap.click_data = {"points": [{"x": 2, "y": "transformer.h.0", "curveNumber": 0}]}
    assert (app.compare.a, app.compare.b) == (f"{FAULTY}/checkpoint-6", f"{FAULTY}/checkpoint-8")
    assert app.active == "Compare"
    app.compare.wait()
    assert app.compare.error == "" and app.compare.result is not None
    assert app.compare.result.summary()["changed"] > 0
    app.active = "Timeline"
    view._pair.value = 4
    view._compare.clicks += 1
    assert (app.compare.a, app.compare.b) == (f"{FAULTY}/checkpoint-10", f"{FAULTY}/checkpoint-12")
    assert app.active == "Compare"
    app.compare.wait()
    assert not view.open_pair(99)
    assert "pair index" in app.timeline.error


def test_bad_folders_show_an_error_and_the_view_recovers(
    runs: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """A missing folder, a folder without checkpoints, one checkpoint instead of its run, a
    path outside the root: one error line in the page; then a good folder builds."""
    root, _ = runs
    app = AppState(root)
    view = TimelineView(app=app)
    st = app.timeline
    cases = {
        "no/such/run": "nothing there",
        f"{FAULTY}/checkpoint-6": "one checkpoint (checkpoint-6)",
        "../elsewhere": "Paths may not leave the root",
        f"{FAULTY}/checkpoint-6/..": "Paths may not leave the root",
    }
    for folder, words in cases.items():
        st.run_dir = folder
        st.build(wait=True)
        assert words in st.error, (folder, st.error)
        assert st.timeline is None
        errors = [o.object for o in objects(view) if isinstance(o, pn.pane.Alert)]
        assert any(words in str(e) for e in errors), folder
    empty = AppState(tmp_path)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("no checkpoints here")
    empty_view = TimelineView(app=empty)
    empty.timeline.run_dir = "notes"
    empty.timeline.build(wait=True)
    assert "none of them a checkpoint" in empty.timeline.error
    assert any(
        "none of them a checkpoint" in str(o.object)
        for o in objects(empty_view)
        if isinstance(o, pn.pane.Alert)
    )
    st.run_dir = FAULTY
    st.build(wait=True)
    assert st.error == "" and st.timeline is not None and view.heatmap is not None


def test_reopening_reads_nothing(runs: tuple[Path, dict[str, Any]], cache_home: Path) -> None:
    """The view builds with the default cache folder: a second build (a reopened page) takes
    every summary from it and opens no checkpoint."""
    root, _ = runs
    app, _view = built(root, "hf_clean/checkpoint-2")
    first = app.timeline.timeline.stats
    assert first["opened"] == 6 and first["cached"] == 0
    assert any(cache_home.glob("ckpt-*.json"))
    again = AppState(root)
    again.browse.open("hf_clean/checkpoint-2")
    view = TimelineView(app=again)
    again.timeline.build(wait=True)
    stats = again.timeline.timeline.stats
    assert stats["opened"] == 0 and stats["cached"] == 6 and stats["pair_passes"] == 0
    assert "6 summaries from the cache" in again.timeline.message
    assert view.heatmap is not None


def test_default_run_folder() -> None:
    assert default_run_dir("") == ""
    assert default_run_dir("runs/exp1/checkpoint-6") == "runs/exp1"
    assert default_run_dir("runs/exp1/checkpoint-6/model.safetensors") == "runs/exp1"
    assert default_run_dir("checkpoint-6") == "."
    assert default_run_dir("runs/exp1/model_1000.pt") == "runs/exp1"
    assert default_run_dir("s3://bucket/run/checkpoint-6") == ""  # remote: not a local folder


@pytest.mark.timeout(900)
def test_heatmap_click_in_a_browser(
    runs: tuple[Path, dict[str, Any]], browser: Any, request: pytest.FixtureRequest
) -> None:
    """In a real page: Build, then a mouse click on the heatmap's column of the update into
    step 8 opens Compare on checkpoint-6 -> checkpoint-8 and runs the diff; no page error."""
    from conftest import REPO, ConsoleLog, serve_app

    root, _ = runs
    with serve_app(root, [root / FAULTY / "checkpoint-8"], "panel-serve-timeline.log") as url:
        context = browser.new_context(viewport={"width": 1500, "height": 1100})
        page = context.new_page()
        page.set_default_timeout(120_000)
        log = ConsoleLog(page)
        page.goto(url)
        page.locator(".bk-tab", has_text="Timeline").first.click()
        page.get_by_role("button", name="Build").click()
        page.locator("text=/5 pairs/").first.wait_for()
        drag = page.locator(".js-plotly-plot .nsewdrag >> visible=true").first
        drag.wait_for()
        time.sleep(1.0)  # let plotly finish drawing
        shots = REPO / "test-artifacts"
        shots.mkdir(exist_ok=True)
        page.screenshot(path=str(shots / f"ui-{request.node.name}-timeline.png"), full_page=True)
        box = drag.bounding_box()
        assert box is not None
        column, n_cols = 2, 5  # pairs: 2->4, 4->6, 6->8, 8->10, 10->12
        page.mouse.click(
            box["x"] + box["width"] * (column + 0.5) / n_cols, box["y"] + box["height"] * 0.5
        )
        page.locator("text=/done — [0-9]+ tensors/").first.wait_for()
        boxes = page.get_by_placeholder("relative to the root")
        values = [boxes.nth(i).input_value() for i in range(boxes.count())]
        assert f"{FAULTY}/checkpoint-6" in values and f"{FAULTY}/checkpoint-8" in values
        page.screenshot(path=str(shots / f"ui-{request.node.name}-compare.png"))
        context.close()
        assert log.errors == [], "the page reported errors:\n" + "\n".join(log.errors)


def test_an_unreadable_checkpoint_is_listed(
    runs: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """A run with one checkpoint cut short (a save killed mid-write): the rest is shown, the
    cut one is listed with its one-line error, and an ``unreadable`` anomaly is in the table."""
    src, _ = runs
    root = tmp_path / "root"
    shutil.copytree(src / "hf_clean", root / "run")
    weights = root / "run" / "checkpoint-8" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    app, view = built(root, "run/checkpoint-2")
    t = app.timeline.timeline
    bad = [c for c in t.checkpoints if c.error is not None]
    assert [Path(c.path).name for c in bad] == ["checkpoint-8"]
    tables = [o.value for o in objects(view) if isinstance(o, pn.widgets.Tabulator)]
    listed = next(df for df in tables if "error" in df.columns)
    assert list(listed["checkpoint"]) == ["checkpoint-8"]
    assert list(listed["error"]) == [bad[0].error]
    kinds = next(df for df in tables if "kind" in df.columns)
    assert "unreadable" in set(kinds["kind"])
    assert view.heatmap is not None and len(view.heatmap.object.data[0].x) == len(t.pairs) == 4
