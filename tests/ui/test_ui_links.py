"""Every view is a link: the state of Compare, the resume doctor, the Timeline and the main
tables' sort order goes into the address and back (pure functions, both directions), and a
fresh page given that address runs again what the first one showed.

The root is the demo (``make_demo``: a training state resumed wrongly, the state after, and a
short run of three checkpoints), written by torch with a real training loop.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_explorer.ui.state import AppState
from ckpt_explorer.ui.url_state import (
    apply_query,
    number_of,
    number_text,
    query_of,
    search_of,
    session_query,
    sort_text,
    sorters_of,
)

A, B = "demo/resumed_from", "demo/after_resume"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ckpt_explorer.demo import make_demo

    out = tmp_path_factory.mktemp("links_root")
    make_demo(out / "demo")
    return out


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The timeline's summary cache under this test's folder (never the user's ~/.cache)."""
    monkeypatch.setenv("CKPT_EXPLORER_CACHE", str(tmp_path / "cache"))


def reopened(root: Path, query: dict[str, str]) -> AppState:
    """A fresh page's state given ``query`` as a browser sends it (bytes per key)."""
    app = AppState(root)
    apply_query(app, session_query({k: [v.encode()] for k, v in query.items()}))
    return app


def test_sort_and_tolerance_texts_round_trip() -> None:
    for sorters in ([{"field": "rel_l2", "dir": "desc"}], [{"field": "a:b c|x|", "dir": "asc"}]):
        assert sorters_of(sort_text(sorters)) == sorters
    assert sort_text([]) == "" and sorters_of("") == []
    assert sorters_of("name") == [{"field": "name", "dir": "asc"}]
    assert sorters_of("name:sideways") == [] and sorters_of(":desc") == []
    for x in (1e-06, 0.1 + 0.2, 3e-4, 1.0):
        assert number_of(number_text(x)) == x
    assert number_text(0.0) == ""
    for bad in ("-1", "nan", "inf", "x", ""):
        assert number_of(bad) is None
    assert search_of({}) == ""
    assert search_of({"tab": "Resume doctor", "a": "x y"}) == "?tab=Resume%20doctor&a=x%20y"


def test_compare_link_reruns_and_restores_the_tensor(root: Path) -> None:
    """The result, the tensor shown A/B, the tolerances, every row and the sort order: a
    fresh page given the address diffs again and shows the same."""
    app = AppState(root)
    app.active = "Compare"
    c = app.compare
    c.param.update(a=A, b=B, atol=1e-6, rtol=0.001, changed_only=False)
    c.run(wait=True)
    changed = next(t for t in c.result.tensors if t.status == "changed")
    c.select(changed.name, wait=True)
    app.sorts = {"Compare": [{"field": "max_abs", "dir": "asc"}]}
    q = query_of(app)
    assert q == {
        "tab": "Compare",
        "a": A,
        "b": B,
        "atol": "1e-06",
        "rtol": "0.001",
        "ab": changed.name,
        "changed": "all",
        "sort": "max_abs:asc",
        "result": "1",
    }
    again = reopened(root, q)
    d = again.compare
    d.wait()
    assert again.active == "Compare" and d.result is not None
    assert (d.a, d.b, d.atol, d.rtol, d.changed_only) == (A, B, 1e-6, 0.001, False)
    assert d.selected == changed.name
    assert again.sorts["Compare"] == [{"field": "max_abs", "dir": "asc"}]
    assert query_of(again) == q
    # A changed after the run: the address no longer says the result is of the form
    d.a = B
    assert "result" not in query_of(again) and "ab" not in query_of(again)


def test_compare_link_without_a_result_does_not_run(root: Path) -> None:
    app = reopened(root, {"tab": "Compare", "a": A, "b": B, "atol": "-3", "rtol": "x"})
    c = app.compare
    assert (c.a, c.b, c.atol, c.rtol) == (A, B, 0.0, 0.0)
    assert c.result is None and not c.running and c.job is None
    assert query_of(app) == {"tab": "Compare", "a": A, "b": B}


def test_doctor_link_diagnoses_again(root: Path) -> None:
    app = AppState(root)
    app.active = "Resume doctor"
    r = app.resume
    r.param.update(a=A, b=B)
    r.run(wait=True)
    assert r.causes
    q = query_of(app)
    assert q == {"tab": "Resume doctor", "a": A, "b": B, "result": "1"}
    again = reopened(root, q)
    again.resume.wait()
    assert again.active == "Resume doctor"
    assert again.resume.examined == (A, B)
    assert [c["cause"] for c in again.resume.causes] == [c["cause"] for c in r.causes]
    assert query_of(again) == q
    # inputs only (never diagnosed): kept, not run
    fresh = reopened(root, {"tab": "Resume doctor", "a": B, "b": A})
    assert (fresh.resume.a, fresh.resume.b, fresh.resume.job) == (B, A, None)


def test_timeline_link_builds_the_run_with_its_pair_series_and_scale(root: Path) -> None:
    app = AppState(root)
    app.active = "Timeline"
    st = app.timeline
    st.run_dir = "demo/run"
    st.build(wait=True)
    assert st.timeline is not None and len(st.timeline.pairs) == 2
    st.pair = 1
    st.lr_scale = "log"
    steps = app.steps
    steps.tensor = steps.names[-1]
    steps.run(wait=True)
    q = query_of(app)
    assert q == {
        "tab": "Timeline",
        "folder": "demo/run",
        "pair": "1",
        "series": steps.names[-1],
        "scale": "log",
        "result": "1",
    }
    again = reopened(root, q)
    again.timeline.wait()
    again.steps.wait()
    assert again.timeline.timeline is not None and again.timeline.pair == 1
    assert again.timeline.lr_scale == "log"
    assert again.steps.tensor == steps.names[-1] and again.steps.result is not None
    assert query_of(again) == q
    # a folder typed but not built: kept, not built
    fresh = reopened(root, {"tab": "Timeline", "folder": "demo/run"})
    assert fresh.timeline.run_dir == "demo/run" and fresh.timeline.job is None
    assert query_of(fresh) == {"tab": "Timeline", "folder": "demo/run"}


def test_sort_of_the_weight_map_round_trips(root: Path) -> None:
    q = {"tab": "Weight map", "ckpt": A, "sort": "bytes:desc"}
    app = reopened(root, q)
    assert app.sorts == {"Weight map": [{"field": "bytes", "dir": "desc"}]}
    assert query_of(app) == q


def test_a_finding_leads_to_its_rows_or_says_why() -> None:
    """Where a clicked finding leads: its tensor, the rows of its file or part, an optimizer
    state id, the Values table for a scheduler file that holds values, or words."""
    from ckpt_explorer.ui.finding_links import finding_link

    tensors = {"modeling/w", "optimizer/state.0.exp_avg"}
    files = {"modeling/model-00001.bin", "optimizer/optim.bin"}
    keys = ["lr_scheduler/last_epoch", "lr_scheduler/base_lrs", "running_states.json/epoch"]

    def link(**row: object) -> tuple[str, str]:
        found = finding_link(row, tensors, files, keys)
        return found.opens, found.target

    assert link(tensor="modeling/w") == ("tensor", "modeling/w")
    assert link(file="model-00001.bin") == ("file", "modeling/model-00001.bin")
    assert link(file="modeling") == ("file", "modeling/")
    assert link(param_id=3.0) == ("param", "state.3.")
    values = finding_link({"file": "lr_scheduler"}, tensors, files, keys)
    assert values.opens == "values" and "Values table" in values.why
    index = finding_link({"file": "modeling/x.bin.index.json"}, tensors, files, keys)
    assert index.opens == "none" and "is an index" in index.why
    whole = finding_link({"tensor": None, "file": float("nan")}, tensors, files, keys)
    assert whole.opens == "none" and "as a whole" in whole.why
    gone = finding_link({"tensor": "nope"}, tensors, files, keys)
    assert gone.opens == "none" and "not a tensor" in gone.why
