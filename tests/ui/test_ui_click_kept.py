"""A click on a row or cell the page has drawn opens what it names, whatever the timing.

Two ways a click used to open nothing (the Compare row whose A/B view never came):

- In a served page each watcher of a view runs queued in the page's session and reads the
  state as it is when it runs: a streamed Compare row still queued when the result lands,
  or the Timeline's ``runs`` and ``timeline`` (one update, watched apart), each asked for
  the same drawing. The second drawing replaced the table or heatmap the browser had just
  shown, and Bokeh drops, without a word, what the browser sends about the replaced one.
  Here the late event is fired by hand after the drawing, as the page's queue runs it.
- Panel's Tabulator ignores a row click while it builds or updates its rows: no selection
  is sent. The cell click it sends all the same now opens the row (Compare, Weight map,
  Validate's findings), fired here as the browser sends it.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import panel as pn
import pytest

from ckpt_explorer.ui.state import AppState


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two safetensors models; two of their 2-D tensors differ."""
    import torch
    from safetensors.torch import save_file

    out = tmp_path_factory.mktemp("clicks")
    gen = torch.Generator().manual_seed(0)
    a = {f"layers.{i}.w": torch.randn(8, 12, generator=gen) for i in range(4)}
    b = {k: v + (0.25 if k in ("layers.1.w", "layers.3.w") else 0) for k, v in a.items()}
    for side, tensors in (("a", a), ("b", b)):
        (out / side).mkdir()
        save_file(tensors, str(out / side / "model.safetensors"))
    return out


def ab_read() -> None:
    """Wait for the A/B reads under way (their job threads)."""
    for t in threading.enumerate():
        if t.name == "ckpt-explorer-ab":
            t.join()


def shown(view: Any, kind: type) -> list[Any]:
    """The objects of ``kind`` the view's page holds now."""
    return list(view.__panel__().select(kind))


def test_a_compare_row_clicked_after_a_late_event_opens_a_and_b(root: Path) -> None:
    from ckpt_explorer.ui.components.compare import CompareView

    app = AppState(root)
    c = app.compare
    c.param.update(a="a", b="b")
    view = CompareView(app=app)
    c.run(wait=True)
    assert c.result is not None, c.error
    tables = [t for t in shown(view, pn.widgets.Tabulator) if "diff-table" in t.css_classes]
    assert len(tables) == 1
    drawn = tables[0]
    c.param.trigger("partial")  # a streamed row's event, queued, runs after the result
    c.param.trigger("result")
    assert any(t is drawn for t in shown(view, pn.widgets.Tabulator))  # the page's table stays
    rows = drawn.value
    i = int(rows.index[rows["name"] == "layers.3.w"][0])
    drawn.selection = [i]  # the user's click on the row the browser shows
    assert c.selected == "layers.3.w"
    ab_read()
    assert c.ab_error == "" and c.ab is not None and c.ab.name == "layers.3.w"


def test_a_click_that_selects_nothing_still_opens_a_and_b(root: Path) -> None:
    """A cell click alone opens the row's tensor, on any page of the table as sorted, and
    the row is highlighted from the server."""
    from bokeh.document import Document
    from panel.models.tabulator import CellClickEvent

    from ckpt_explorer.ui.components.compare import CompareView

    app = AppState(root)
    c = app.compare
    c.param.update(a="a", b="b", changed_only=False)
    view = CompareView(app=app)
    c.run(wait=True)
    tbl = view._tbl
    model = tbl.get_root(Document())
    tbl.param.update(page_size=2, sorters=[{"field": "name", "dir": "desc"}])
    tbl.page = 2  # layers.1.w, layers.0.w
    names = list(model.source.data["name"])
    assert names == ["layers.1.w", "layers.0.w"]
    tbl._process_event(CellClickEvent(model=model, column="name", row=names.index("layers.1.w")))
    assert c.selected == "layers.1.w"
    assert tbl.value.iloc[tbl.selection[0]]["name"] == "layers.1.w"  # the row highlighted
    ab_read()
    assert c.ab is not None and c.ab.name == "layers.1.w"


def test_a_new_switch_or_result_is_drawn(root: Path) -> None:
    """The table is drawn again when what it shows changes: the switch, a new run."""
    from ckpt_explorer.ui.components.compare import CompareView

    app = AppState(root)
    c = app.compare
    c.param.update(a="a", b="b")
    view = CompareView(app=app)
    c.run(wait=True)
    first = view._tbl
    assert len(first.value) == 2  # changed only
    c.changed_only = False
    assert view._tbl is not first and len(view._tbl.value) == 4
    again = view._tbl
    c.run(wait=True)
    assert view._tbl is not again and len(view._tbl.value) == 4


@pytest.fixture(scope="module")
def runs_root(real_checkpoints: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real Trainer runs side by side in ``runs``."""
    made, _ = real_checkpoints("timeline")
    out = tmp_path_factory.mktemp("click_runs")
    for run in ("hf_clean", "hf_lr_changed"):
        shutil.copytree(made / run, out / "runs" / run)
    return out


def test_a_heatmap_cell_clicked_after_a_late_event_opens_compare(
    runs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckpt_explorer.ui.components.timeline_view import TimelineView

    monkeypatch.setenv("CKPT_EXPLORER_CACHE", str(tmp_path / "cache"))
    app = AppState(runs_root)
    view = TimelineView(app=app)
    st = app.timeline
    st.run_dir = "runs"
    st.build(wait=True)
    assert not st.error and len(st.runs) == 2
    drawn = view.heatmap
    assert drawn is not None
    st.param.trigger("runs")  # the build's two events, each queued apart
    st.param.trigger("timeline")
    assert any(h is drawn for h in shown(view, pn.pane.Plotly))  # the page's heatmap stays
    drawn.click_data = {"points": [{"x": 1, "y": "transformer.h.0", "curveNumber": 0}]}
    assert app.active == "Compare" and app.compare.a and app.compare.b
    app.compare.wait()
    # choosing other runs draws them
    st.runs = ["hf_clean"]
    assert view.heatmap is not drawn


def click(tbl: Any, value: str, column: str = "name") -> None:
    """A click on the first cell of ``column`` holding ``value`` on the table's page, as
    the browser sends it (a cell click naming the row's place on the page shown)."""
    from bokeh.document import Document
    from panel.models.tabulator import CellClickEvent

    model = tbl.get_root(Document())
    row = list(model.source.data[column]).index(value)
    tbl._process_event(CellClickEvent(model=model, column=column, row=row))


def test_a_weight_map_click_that_selects_nothing_opens_the_tensor(root: Path) -> None:
    from ckpt_explorer.ui.components.weight_map import WeightMap

    app = AppState(root)
    assert app.browse.open("a"), app.browse.error
    view = WeightMap(app=app)
    view._table.sorters = [{"field": "name", "dir": "desc"}]
    click(view._table, "layers.2.w")
    assert app.browse.selected == "layers.2.w"
    names = list(view._table.value["name"])
    assert view._table.selection == [names.index("layers.2.w")]  # its row is highlighted


def test_a_finding_click_that_selects_nothing_opens_it_once(
    ui_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finding's click opens it (as a cell click alone, or with its selection) once."""
    from ckpt_explorer.ui.components.validate import ValidateView

    app = AppState(ui_root)
    assert app.browse.open("demo/resumed_from"), app.browse.error
    view = ValidateView(app=app)
    view._start()
    app.validate.wait()
    tbl = next(t for t in shown(view, pn.widgets.Tabulator) if "findings" in t.css_classes)
    opened: list[Any] = []
    follow = app.open_finding
    monkeypatch.setattr(app, "open_finding", lambda row: opened.append(row) or follow(row))
    files = list(tbl.value["file"])
    i = next(k for k, f in enumerate(files) if "modeling" in str(f) and "index" not in str(f))
    click(tbl, files[i], "file")
    assert app.active == "Weight map" and len(opened) == 1
    assert tbl.selection == [i]  # its row is highlighted
    tbl.selection = [i]  # the same click's selection, when Tabulator sends one
    assert len(opened) == 1
    click(tbl, files[i], "file")  # a second click on the row: its selection already
    assert len(opened) == 1, "opened again while its view is in front"
    app.active = "Validate"  # back on the findings, the same one clicked again opens it
    tbl.selection = []
    click(tbl, files[i], "file")
    assert len(opened) == 2 and app.active == "Weight map"
