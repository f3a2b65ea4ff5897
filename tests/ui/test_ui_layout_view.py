"""The Layout view without a browser: ``fit``'s grid, checks and memory, shown as they are.

Checkpoints are the fit fixture's tiny transformers models (``save_pretrained``) whose tp 2
verdicts were decided by a real ColossalAI 0.5.0 ``booster.boost`` (tests/fixture_makers/
fit_maker.py), and a ColossalAI pipeline checkpoint written by a real Booster.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import panel as pn
import pytest

from ckpt_explorer.fit import Layout, fit_checkpoint, parse_size
from ckpt_explorer.ui.components.layout_view import LayoutView, grid_matrix
from ckpt_explorer.ui.components.overview import Overview
from ckpt_explorer.ui.state import AppState

CASES = ("llama_4h_1kv", "llama_32h_8kv", "llama_odd_intermediate")


@pytest.fixture(scope="module")
def fit_root(tmp_path_factory: pytest.TempPathFactory, real_checkpoints: Any) -> Path:
    """The fit cases under one root, and ``llama_bare``: llama_32h_8kv without config.json
    (head counts are then not decidable: no head_dim without a config or a per-head norm)."""
    src, manifest = real_checkpoints("fit")
    root = tmp_path_factory.mktemp("fit_root")
    for case in CASES:
        shutil.copytree(src / manifest["cases"][case]["path"], root / case)
    shutil.copytree(root / "llama_32h_8kv", root / "llama_bare")
    (root / "llama_bare" / "config.json").unlink()
    return root


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


def shown(view: Any) -> tuple[str, Any, Any]:
    """(all pane text, the grid figure, the checks table frame) the view shows."""
    objs = objects(view)
    texts = " ".join(str(o.object) for o in objs if isinstance(o, pn.pane.HTML | pn.pane.Alert))
    figs = [o.object for o in objs if isinstance(o, pn.pane.Plotly) and o.name == "fit-grid"]
    tables = [o.value for o in objs if isinstance(o, pn.widgets.Tabulator)]
    checks = next((t for t in tables if "rule" in t.columns), None)
    return texts, figs[0] if figs else None, checks


def layout_view(root: Path, path: str, **form: Any) -> tuple[AppState, LayoutView]:
    app = AppState(root)
    assert app.browse.open(path), app.browse.error
    app.active = "Layout"
    view = LayoutView(app=app)
    app.fit.wait()
    if form:
        app.fit.param.update(**form)  # the form's watcher runs fit again
        app.fit.wait()
    return app, view


def test_grid_cells_are_fit_results(fit_root: Path, real_checkpoints: Any) -> None:
    """Every cell shows ``fit``'s verdict for that tp x pp; the asked layout is the one that
    ColossalAI refused (1 KV head at tp 2), with the reason in the cell's hover text."""
    _, manifest = real_checkpoints("fit")
    for case in CASES:
        app, view = layout_view(fit_root, case, tp=2)
        r = app.fit.report
        want = fit_checkpoint(fit_root / case, Layout(tp=2, gpu_mem=parse_size("80GB")))
        assert r.fits == want.fits == manifest["cases"][case]["boosted"], case
        assert r.grid == want.grid
        _, fig, checks = shown(view)
        heat = fig.data[0]
        g = grid_matrix(want.grid)
        assert [list(row) for row in heat.text] == g["text"]
        cells = {(c["tp"], c["pp"]): c for c in want.grid}
        mark = {True: "✓", False: "✗", None: "unknown"}
        for i, tp in enumerate(g["tp"]):
            for j, pp in enumerate(g["pp"]):
                c = cells[(tp, pp)]
                assert heat.text[i][j] == mark[c["fits"]]
                for reason in c["reasons"]:
                    assert reason[:40] in heat.hovertext[i][j].replace("<br>", " ")
        failing = set(checks.loc[checks["result"] == "✗", "rule"])
        assert failing == {c.rule for c in want.checks if c.ok is False}
    app, view = layout_view(fit_root, "llama_4h_1kv", tp=2)
    g = grid_matrix(app.fit.report.grid)
    i, j = g["tp"].index(2), g["pp"].index(1)
    assert g["text"][i][j] == "✗" and "KV heads 1" in g["hover"][i][j]
    assert g["text"][g["tp"].index(1)][j] == "✓"


def test_an_undecidable_check_shows_unknown_never_a_tick(fit_root: Path) -> None:
    app, view = layout_view(fit_root, "llama_bare", tp=2)
    r = app.fit.report
    assert r.arch.heads is None and r.fits is None
    texts, fig, checks = shown(view)
    assert "UNKNOWN" in texts and "FITS" not in texts.replace("DOES NOT FIT", "")
    assert set(checks.loc[checks["rule"] == "kv_heads_tp", "result"]) == {"unknown"}
    heat = fig.data[0]
    tp_rows = {int(str(t).split()[1]): row for t, row in zip(heat.y, heat.text, strict=True)}
    assert "✓" in tp_rows[1]  # tp 1 splits no head: decidable
    for tp, row in tp_rows.items():
        if tp > 1:
            assert "✓" not in row and "unknown" in row, (tp, row)


def test_bad_input_shows_an_error_and_the_view_keeps_working(fit_root: Path) -> None:
    app, view = layout_view(fit_root, "llama_32h_8kv")
    assert app.fit.report is not None and app.fit.error == ""
    app.fit.gpu_mem = "eighty"
    app.fit.wait()
    texts, fig, _ = shown(view)
    assert "GPU memory like 80GB" in texts and "'eighty'" in texts and fig is None
    app.fit.gpu_mem = "80GiB"
    app.fit.wait()
    assert app.fit.error == "" and app.fit.report.layout.gpu_mem == 80 * 2**30
    app.fit.tp = 0
    app.fit.wait()
    assert "tp a whole number >= 1" in shown(view)[0]
    app.fit.param.update(tp=8, gpu_mem="1MB")  # a layout that does not fit in memory
    app.fit.wait()
    r = app.fit.report
    assert app.fit.error == "" and r.fits is False and r.memory.fits is False
    texts, fig, checks = shown(view)
    assert "DOES NOT FIT" in texts
    assert checks.loc[checks["rule"] == "memory_per_gpu", "result"].item() == "✗"


def test_overview_says_which_layout_wrote_the_checkpoint(
    real_checkpoints: Any, fit_root: Path
) -> None:
    cai, _ = real_checkpoints("colossalai")
    app = AppState(cai / "pipeline")
    assert app.browse.open("modeling"), app.browse.error
    texts = shown(Overview(app=app))[0]
    assert "Written by" in texts and "pp &gt;= 2" in texts
    plain = AppState(fit_root)
    assert plain.browse.open("llama_32h_8kv")
    texts = shown(Overview(app=plain))[0]
    # no parallel layout in its files: what they state instead (config.json's writer)
    version = json.loads((fit_root / "llama_32h_8kv" / "config.json").read_text())[
        "transformers_version"
    ]
    assert "Written by" in texts and f"transformers {version}" in texts
    assert "config.json transformers_version" in texts and "pp &gt;=" not in texts
