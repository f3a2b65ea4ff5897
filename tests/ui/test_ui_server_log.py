"""The server's log stays clean for a whole session, in a real browser against
``panel serve`` run with every warning shown (``PYTHONWARNINGS=default``): a page opened on
a Compare link (its figures drawn), every tab shown, the page closed. No warning (Panel's
deprecations, sizing overrides, BokehUserWarning) and no traceback (the websocket write
that fails when a tab closes) may appear, except the ones listed in :data:`UPSTREAM`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ARTIFACTS, ConsoleLog, serve_app
from ui_pages import tab, wait_text

from ckpt_explorer.ui.tabs import TABS

pytestmark = pytest.mark.timeout(900)

A, B = "demo/resumed_from", "demo/after_resume"
AB_TENSOR = "modeling/layers.0.self_attn.in_proj_weight"
LOG = "panel-serve-quiet.log"

# Warnings the project cannot remove, with why: Bokeh 3.9's ColumnDataSource converts a
# DataFrame with ``reset_index(inplace=True)`` (bokeh/models/sources.py), which pandas 3.1
# deprecates; every table the page draws goes through it.
UPSTREAM = {
    "bokeh/models/sources.py": re.compile(r"Pandas4Warning: The inplace keyword"),
}
BAD = re.compile(r"Warning|Traceback|Task exception|Error\b")


@pytest.fixture(scope="module")
def quiet_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from ckpt_explorer.demo import make_demo

    root = tmp_path_factory.mktemp("server_log")
    make_demo(root / "demo")
    old = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = "default"  # the served process shows every warning
    try:
        with serve_app(root, [root / A], LOG) as url:
            yield url
    finally:
        if old is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = old


def complaints(log: str) -> list[str]:
    """The log's warning and traceback lines not explained by :data:`UPSTREAM`."""
    lines = log.splitlines()
    out = []
    for i, line in enumerate(lines):
        if not BAD.search(line):
            continue
        upstream = any(path in line and rule.search(line) for path, rule in UPSTREAM.items())
        if not upstream:
            out.append("\n".join(lines[i : i + 3]))
    return out


def test_a_whole_session_leaves_no_warning_or_traceback_in_the_server_log(
    browser: Any, quiet_app: str
) -> None:
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(120_000)
    console = ConsoleLog(page)
    page.goto(f"{quiet_app}?tab=Compare&a={A}&b={B}&ab={AB_TENSOR}&result=1")
    wait_text(page, "t.includes('Histograms of A and B')", timeout=180_000)
    for name in TABS:
        tab(page, name)
        if name != TABS[0]:  # a view is built before its tab is written to the address
            page.wait_for_function(
                "(n) => new URLSearchParams(location.search).get('tab') === n", arg=name
            )
    time.sleep(2)
    page.screenshot(path=str(ARTIFACTS / "ui-server-log-last-tab.png"))
    context.close()  # the tab closes: the server writes to a socket that is gone
    log_path = Path(ARTIFACTS / LOG)
    deadline = time.monotonic() + 60
    while "WebSocket connection closed" not in log_path.read_text():
        assert time.monotonic() < deadline, "the server never saw the page close"
        time.sleep(0.5)
    time.sleep(3)  # what the server reports about the closed page
    found = complaints(log_path.read_text())
    assert found == [], "the server log has warnings or tracebacks:\n" + "\n---\n".join(found)
    assert console.errors == [], console.errors
