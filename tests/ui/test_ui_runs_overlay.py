"""Several runs overlaid on the Timeline's scalar charts, without a browser.

The runs are two real transformers Trainer runs of the timeline fixture
(tests/fixture_makers/timeline_maker.py), copied side by side into one folder: ``hf_clean``
and ``hf_lr_changed`` (resumed at step 6 with its scheduler's base LRs raised 10x, so its LR
from step 8 on is ten times hf_clean's).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from ckpt_explorer.timeline import build_timeline
from ckpt_explorer.ui.components.timeline_view import TimelineView
from ckpt_explorer.ui.state import AppState
from ckpt_explorer.ui.timeline_state import runs_in
from ckpt_explorer.ui.url_state import apply_query, query_of

RUNS = ["hf_clean", "hf_lr_changed"]


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default summary cache under this test's folder (never the user's ~/.cache)."""
    monkeypatch.setenv("CKPT_EXPLORER_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def root(real_checkpoints: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``runs/hf_clean`` and ``runs/hf_lr_changed``: one folder holding two runs."""
    made, _ = real_checkpoints("timeline")
    out = tmp_path_factory.mktemp("runs_root")
    for run in RUNS:
        shutil.copytree(made / run, out / "runs" / run)
    return out


def built(root: Path, query: dict[str, str] | None = None) -> tuple[AppState, TimelineView]:
    """The app's Timeline view with ``runs`` built (through ``query`` when given)."""
    app = AppState(root)
    view = TimelineView(app=app)
    if query is None:
        app.timeline.run_dir = "runs"
        app.timeline.build(wait=True)
    else:
        apply_query(app, query)
        assert app.timeline.job is not None
        app.timeline.job.join()
    assert not app.timeline.error, app.timeline.error
    return app, view


def lr_lines(view: TimelineView) -> list[Any]:
    assert view._lr is not None
    return list(view._lr.object.data)


def test_a_folder_of_runs_is_found_and_each_run_built(root: Path) -> None:
    assert runs_in(root / "runs") == RUNS
    assert runs_in(root / "runs" / "hf_clean") == []  # a run itself: one run, not several
    app, _ = built(root)
    st = app.timeline
    assert st.runs_found == RUNS and st.runs == RUNS and st.focus() == "hf_clean"
    assert Path(st.timeline.run_dir).name == "hf_clean"
    for run in RUNS:
        ref = build_timeline(root / "runs" / run).series()  # the engine, no cache
        got = st.overlaid()[run].series()
        assert got["steps"] == ref["steps"] == [2, 4, 6, 8, 10, 12]
        assert got["lr"] == ref["lr"] and got["opt_step"] == ref["opt_step"]
    clean = st.overlaid()["hf_clean"].series()["lr"]["group 0"]
    raised = st.overlaid()["hf_lr_changed"].series()["lr"]["group 0"]
    assert raised[:3] == clean[:3]  # the same run up to the resume at step 6
    assert raised[3] == pytest.approx(10 * clean[3], rel=1e-6)  # step 8: base LRs x10


def test_each_run_is_one_colour_and_one_legend_entry(root: Path) -> None:
    app, view = built(root)
    st = app.timeline
    lines = lr_lines(view)
    groups = sorted(st.overlaid()["hf_clean"].series()["lr"])
    assert len(lines) == len(RUNS) * len(groups)
    assert sorted(t.name for t in lines if t.showlegend) == RUNS  # one entry per run
    assert {t.legendgroup for t in lines} == set(RUNS)
    colour = {t.legendgroup: t.line.color for t in lines}
    assert len(set(colour.values())) == 2
    for t in lines:
        assert t.line.color == colour[t.legendgroup]
        assert f"run {t.legendgroup}" in t.hovertemplate and "step %{x}" in t.hovertemplate
        steps = st.overlaid()[t.legendgroup].series()["steps"]
        assert list(t.x) == steps
    # hf_clean hidden: hf_lr_changed keeps its colour, the charts show it alone
    st.runs = ["hf_lr_changed"]
    assert st.focus() == "hf_lr_changed"
    assert Path(st.timeline.run_dir).name == "hf_lr_changed"
    left = lr_lines(view)
    assert {t.legendgroup for t in left} == {"hf_lr_changed"}
    assert {t.line.color for t in left} == {colour["hf_lr_changed"]}
    moments = [
        o for o in view._results.objects if getattr(o, "title", "").startswith("Optimizer moment")
    ]
    assert moments and all(
        t.legendgroup == "hf_lr_changed" for t in moments[0].objects[0].object.data
    )


def test_the_link_keeps_the_runs_chosen(root: Path) -> None:
    app, _ = built(root)
    app.active = "Timeline"
    assert "runs" not in query_of(app)  # every run: the link lists none
    app.timeline.runs = ["hf_lr_changed"]
    q = query_of(app)
    assert (q["folder"], q["result"], q["runs"]) == ("runs", "1", "hf_lr_changed")
    again, view = built(root, q)
    assert again.timeline.runs == ["hf_lr_changed"] and again.active == "Timeline"
    assert {t.legendgroup for t in lr_lines(view)} == {"hf_lr_changed"}
    assert query_of(again) == q


def test_a_single_run_is_drawn_as_before(root: Path) -> None:
    app = AppState(root)
    view = TimelineView(app=app)
    app.timeline.run_dir = "runs/hf_clean"
    app.timeline.build(wait=True)
    st = app.timeline
    assert st.run_timelines == {} and st.runs_found == [] and st.focus() == ""
    lines = lr_lines(view)
    assert [t.name for t in lines] == sorted(st.timeline.series()["lr"])
    assert all(t.legendgroup is None for t in lines)
    app.active = "Timeline"
    assert "runs" not in query_of(app)
