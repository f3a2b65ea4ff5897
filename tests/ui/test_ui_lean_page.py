"""A served page starts without plotly.js and MathJax, and still draws every chart.

Panel writes into a served page's head every loaded model's scripts (plotly.js 4.8 MB,
bokeh-mathjax 1.8 MB): the browser parsed them before the first view showed. A lean page
(``ui.lean_page``) leaves both out and its loader fetches plotly.js from the page's own
server when a chart is first drawn. Checked here: the page's HTML as served, the same
Panel call for another document (a notebook's, say) unchanged, and in chromium a chart
drawn after a click and one drawn on the first screen (a link to a tensor's detail), with
every request kept on 127.0.0.1.
"""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
from typing import Any

import pytest
from conftest import ConsoleLog
from ui_pages import shot, tab, wait_text

pytestmark = pytest.mark.timeout(900)

LEFT_OUT = ("plotly-", "bokeh-mathjax", "maplibre-gl")

# the page's plotly figures: how many, and how many plotly has drawn (layout and SVG made)
PLOTS = """(() => { const plots = []; const walk = (n) => { if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.children || []) {
    if (c.classList && c.classList.contains('js-plotly-plot')) plots.push(c); walk(c); } };
  walk(document.body);
  return [plots.length, plots.filter((p) => p._fullLayout && p.querySelector('.main-svg')).length];
})()"""


def wait_drawn(page: Any, at_least: int, timeout_s: float = 120.0) -> list[int]:
    """Wait until the page holds ``at_least`` plotly figures, each drawn."""
    deadline = time.monotonic() + timeout_s
    while True:
        found, drawn = page.evaluate(PLOTS)
        if found >= at_least and drawn == found:
            return [found, drawn]
        assert time.monotonic() < deadline, f"{drawn} of {found} figures drawn"
        time.sleep(0.3)


def test_the_served_page_head_leaves_out_plotly_and_mathjax(served_app: str) -> None:
    with urllib.request.urlopen(served_app, timeout=120) as r:
        html = r.read().decode()
    for bundle in LEFT_OUT:
        assert bundle not in html, f"{bundle} is in the page's head"
    # what the first screen draws is still there
    for bundle in ("bokeh.min.js", "panel.min.js", "tabulator.min.js"):
        assert bundle in html


def test_only_lean_documents_lose_the_bundles() -> None:
    import panel as pn
    import plotly.graph_objects as go
    from bokeh.document import Document
    from panel.io.resources import Resources, bundle_resources
    from panel.io.state import set_curdoc

    from ckpt_explorer.ui import lean_page

    def head(doc: Document) -> str:
        # each a root of the page, as a template's parts are (Panel asks for MathJax when a
        # root is a Markdown or HTML pane)
        pn.pane.Markdown("a").server_doc(doc)
        pn.pane.Plotly(go.Figure()).server_doc(doc)
        with set_curdoc(doc):
            bundle = bundle_resources(doc.roots, Resources(mode="server"))
        return " ".join(str(f) for f in [*bundle.js_files, *bundle.css_files])

    lean, other = Document(), Document()
    src = lean_page.mark(lean)
    assert src is not None and src.startswith("static/") and src.endswith(".js")
    lean_head, other_head = head(lean), head(other)
    for bundle in LEFT_OUT:
        assert bundle not in lean_head
        assert bundle in other_head  # a notebook's or another app's page is as Panel made it


def _record(page: Any) -> list[str]:
    urls: list[str] = []
    page.on("request", lambda r: urls.append(r.url))
    return urls


def _outside(urls: list[str]) -> list[str]:
    return [u for u in urls if urllib.parse.urlsplit(u).hostname not in ("127.0.0.1", None)]


def test_charts_draw_after_a_click_with_plotly_fetched_from_the_page_server(
    browser: Any, served_app: str
) -> None:
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(120_000)
    log = ConsoleLog(page)  # console errors, page errors (but Panel's known plotly race)
    urls = _record(page)
    try:
        page.goto(served_app)
        page.wait_for_selector("text=Why this is")
        tab(page, "Weight map")
        page.locator(".weight-map .tabulator-row").first.click()
        page.locator("text=Histogram").first.wait_for()
        wait_drawn(page, 2)  # the detail's histogram and slice
        tab(page, "Compare")
        page.get_by_role("button", name="Compare", exact=True).click()
        wait_text(page, "t.includes('Verdict')", timeout=300_000)
        wait_drawn(page, 3)
        shot(page, "lean-page-charts")
    finally:
        context.close()
    assert log.errors == []
    fetched = [u for u in urls if "/plotlyplot/plotly-" in u]
    assert len(fetched) == 1 and urllib.parse.urlsplit(fetched[0]).hostname == "127.0.0.1"
    assert not any("mathjax" in u for u in urls)
    assert _outside(urls) == []


def test_a_chart_on_the_first_screen_is_drawn(browser: Any, served_app: str) -> None:
    """A link to a tensor's detail: the chart is built with the page, before the loader's
    script may have run (its first draw waits for plotly.js, or is made once it is there)."""
    name = "modeling/layers.0.self_attn.in_proj_weight"
    query = urllib.parse.urlencode({"tab": "Weight map", "tensor": name})
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(120_000)
    log = ConsoleLog(page)  # console errors, page errors (but Panel's known plotly race)
    urls = _record(page)
    try:
        page.goto(f"{served_app}?{query}")
        page.locator("text=Histogram").first.wait_for()
        wait_drawn(page, 2)
    finally:
        context.close()
    assert log.errors == []
    assert _outside(urls) == []
