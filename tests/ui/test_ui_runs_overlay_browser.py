"""Several runs overlaid on the Timeline, in a real browser (Debian chromium through
Playwright) against ``panel serve``: a folder holding two real transformers Trainer runs
(the timeline fixture's ``hf_clean`` and ``hf_lr_changed``) draws one legend entry and one
colour per run on the LR chart; a run removed from the multi-select leaves the chart and the
address, and that address opened in a fresh page shows the same runs.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from conftest import ARTIFACTS, ConsoleLog, serve_app
from ui_pages import shot

pytestmark = pytest.mark.timeout(900)

RUNS = ["hf_clean", "hf_lr_changed"]

# the LR chart's traces (run, shown in the legend, colour) and its drawn legend entries
LR_CHART = """() => { let found = null; const walk = (n) => {
  if (found) return; if (n.shadowRoot) walk(n.shadowRoot);
  if (n.classList && n.classList.contains('js-plotly-plot') && n.data && n.layout
      && n.layout.yaxis && n.layout.yaxis.title && n.layout.yaxis.title.text === 'lr') {
    found = n; return; }
  for (const c of n.children || []) walk(c); };
  walk(document.body); if (!found) return null;
  return {traces: found.data.map((t) => ({run: t.legendgroup || t.name,
            legend: t.showlegend !== false, colour: (t.line || {}).color || ''})),
          entries: Array.from(found.querySelectorAll('.legend .traces'))
            .map((e) => e.textContent.trim())}; }"""


@pytest.fixture(scope="module")
def runs_app(real_checkpoints: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    made, _ = real_checkpoints("timeline")
    root = tmp_path_factory.mktemp("runs_browser")
    for run in RUNS:
        shutil.copytree(made / run, root / "runs" / run)
    cache = tmp_path_factory.mktemp("runs_cache")
    old = os.environ.get("CKPT_EXPLORER_CACHE")
    os.environ["CKPT_EXPLORER_CACHE"] = str(cache)  # the server's timeline cache
    try:
        opened = [root / "runs" / RUNS[0] / "checkpoint-12"]
        with serve_app(root, opened, "panel-serve-runs.log") as url:
            yield url
    finally:
        if old is None:
            os.environ.pop("CKPT_EXPLORER_CACHE", None)
        else:
            os.environ["CKPT_EXPLORER_CACHE"] = old


@pytest.fixture
def opened(browser: Any, runs_app: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    """``opened(query)``: a fresh page at the app's ``?query``; no console errors allowed."""
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    pages: list[Any] = []
    logs: list[ConsoleLog] = []

    def go(query: str) -> Any:
        pg = context.new_page()
        pg.set_default_timeout(120_000)
        logs.append(ConsoleLog(pg))
        pg.goto(runs_app + query)
        pages.append(pg)
        return pg

    yield go
    ARTIFACTS.mkdir(exist_ok=True)
    if pages:
        pages[-1].screenshot(path=str(ARTIFACTS / f"ui-{request.node.name}-end.png"))
    context.close()
    errors = [e for log in logs for e in log.errors]
    assert errors == [], "the page reported errors:\n" + "\n".join(errors)


def lr_chart(page: Any, runs: list[str]) -> dict[str, Any]:
    """The LR chart once it draws exactly ``runs`` (legend entries, in order)."""
    page.wait_for_function(
        f"(want) => {{ const c = ({LR_CHART})(); return c !== null "
        "&& JSON.stringify(c.entries) === JSON.stringify(want); }",
        arg=runs,
        timeout=180_000,
    )
    chart: dict[str, Any] = page.evaluate(LR_CHART)
    return chart


def shot_lr(page: Any, name: str) -> None:
    """A screenshot of the LR chart's section (kept in test-artifacts/)."""
    section = page.locator(".card", has_text="Learning rate").last
    section.scroll_into_view_if_needed()
    shot(page, name)


def address(page: Any) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(page.url).query).items()}


def test_runs_are_overlaid_and_the_link_keeps_the_choice(opened: Any) -> None:
    page = opened("?tab=Timeline&folder=runs&result=1")
    chart = lr_chart(page, RUNS)
    assert chart["entries"] == RUNS  # one legend entry per run
    runs = [t["run"] for t in chart["traces"]]
    assert sorted(set(runs)) == RUNS and runs.count(RUNS[0]) == runs.count(RUNS[1])
    assert sum(t["legend"] for t in chart["traces"]) == 2
    colours = {t["run"]: t["colour"] for t in chart["traces"]}
    assert len(set(colours.values())) == 2
    shot_lr(page, "runs-overlaid")
    # hf_clean removed from the multi-select: the chart and the address follow
    chip = page.locator(".runs .choices__item", has_text=RUNS[0]).first
    chip.locator(".choices__button").click()
    chart = lr_chart(page, RUNS[1:])
    assert {t["run"] for t in chart["traces"]} == {RUNS[1]}
    assert {t["colour"] for t in chart["traces"]} == {colours[RUNS[1]]}  # its colour kept
    page.wait_for_function("() => window.location.search.includes('runs=')")
    q = address(page)
    assert (q["tab"], q["folder"], q["result"], q["runs"]) == ("Timeline", "runs", "1", RUNS[1])
    # the link opened afresh: the same run, alone, in the chart and the multi-select
    again = opened("?" + urlsplit(page.url).query)
    chart = lr_chart(again, RUNS[1:])
    assert {t["run"] for t in chart["traces"]} == {RUNS[1]}
    chips = again.locator(".runs .choices__inner .choices__item").all_inner_texts()
    assert [c.replace("Remove item", "").strip() for c in chips] == [RUNS[1]]
    assert address(again)["runs"] == RUNS[1]
    shot_lr(again, "runs-link-reopened")
