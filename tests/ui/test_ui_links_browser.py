"""A link reopens the same screen, in a real browser (Debian chromium through Playwright)
against ``panel serve``: an address written by a page that had compared, diagnosed or built
a timeline, opened in a fresh page, runs that again and shows the same result, selection,
tolerances and sort order. Served over a root holding only the demo (``make_demo``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from conftest import ARTIFACTS, ConsoleLog, serve_app
from ui_pages import shot, text, wait_text

pytestmark = pytest.mark.timeout(900)

A, B = "demo/resumed_from", "demo/after_resume"
AB_TENSOR = "modeling/layers.0.self_attn.in_proj_weight"  # changed by the demo's resume


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ckpt_explorer.demo import make_demo

    root = tmp_path_factory.mktemp("links_browser")
    make_demo(root / "demo")
    return root


@pytest.fixture(scope="module")
def demo_app(demo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import os

    cache = tmp_path_factory.mktemp("links_cache")
    old = os.environ.get("CKPT_EXPLORER_CACHE")
    os.environ["CKPT_EXPLORER_CACHE"] = str(cache)  # the server's timeline cache
    try:
        with serve_app(demo_root, [demo_root / A], "panel-serve-links.log") as url:
            yield url
    finally:
        if old is None:
            os.environ.pop("CKPT_EXPLORER_CACHE", None)
        else:
            os.environ["CKPT_EXPLORER_CACHE"] = old


@pytest.fixture
def opened(browser: Any, demo_app: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    """``opened(query)``: a fresh page (its own server session) at the app's ``?query``; no
    console errors allowed."""
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    pages: list[Any] = []
    logs: list[ConsoleLog] = []

    def go(query: str) -> Any:
        pg = context.new_page()
        pg.set_default_timeout(120_000)
        logs.append(ConsoleLog(pg))
        pg.goto(demo_app + query)
        pages.append(pg)
        return pg

    yield go
    ARTIFACTS.mkdir(exist_ok=True)
    if pages:
        pages[-1].screenshot(path=str(ARTIFACTS / f"ui-{request.node.name}-end.png"))
    context.close()
    errors = [e for log in logs for e in log.errors]
    assert errors == [], "the page reported errors:\n" + "\n".join(errors)


def address(page: Any) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(page.url).query).items()}


def test_a_compare_link_reruns_with_its_tensor_tolerances_and_sort(opened: Any) -> None:
    query = (
        f"?tab=Compare&a={A}&b={B}&atol=1e-07&rtol=0.001&ab={AB_TENSOR}"
        "&changed=all&sort=name:desc&result=1"
    )
    page = opened(query)
    page.locator("text=Verdict").first.wait_for()
    assert "DIFFERENT" in text(page)
    # the tensor of the link: its row selected on the page shown, its A/B view drawn
    selected = page.locator(".diff-table .tabulator-row.tabulator-selected")
    selected.first.wait_for()
    assert AB_TENSOR in selected.first.inner_text()
    wait_text(page, "t.includes('Histograms of A and B') && t.includes('Histogram of A − B')")
    # the tolerances in their boxes, every row (the switch off), the table sorted by name desc
    boxes = page.locator("input.bk-input[type='text'], input.bk-input[inputmode]")
    values = [v for v in boxes.evaluate_all("els => els.map(e => e.value)") if v]
    assert any(v in ("1e-7", "1e-07", "0.0000001") for v in values), values
    assert any(v == "0.001" for v in values), values
    header = page.locator(".diff-table .tabulator-col[tabulator-field='name']").first
    assert header.get_attribute("aria-sort") == "descending"
    names = page.locator(".diff-table .tabulator-cell[tabulator-field='name']")
    shown = [n.strip() for n in names.all_inner_texts()]
    assert shown == sorted(shown, reverse=True), shown
    # the page's address still says all of it
    page.wait_for_function("() => window.location.search.includes('result=1')")
    q = address(page)
    assert q["ab"] == AB_TENSOR and q["sort"] == "name:desc" and q["changed"] == "all"
    assert float(q["atol"]) == 1e-07 and float(q["rtol"]) == 0.001
    shot(page, "link-compare")


def test_a_doctor_link_diagnoses_again(opened: Any) -> None:
    page = opened(f"?tab=Resume+doctor&a={A}&b={B}&result=1")
    page.locator("text=Likely causes").first.wait_for()
    wait_text(page, "t.includes('Causes for ' + arg)", f"{A} → {B}")
    assert "scheduler" in text(page).lower()
    q = address(page)
    assert (q["tab"], q["a"], q["b"], q["result"]) == ("Resume doctor", A, B, "1")
    shot(page, "link-doctor")


def test_a_timeline_link_builds_its_run(opened: Any) -> None:
    page = opened("?tab=Timeline&folder=demo/run&result=1&pair=1&scale=log")
    page.locator("text=Update ratio").first.wait_for()
    wait_text(page, "t.includes('CHECKPOINTS') || t.includes('Checkpoints')")
    assert "run" in text(page)
    pair = page.locator("select").filter(has_text="→").first
    assert "4 → 6" in pair.evaluate("s => s.options[s.selectedIndex].text")
    active = page.locator(".lr-scale .bk-btn.bk-active")
    assert active.first.inner_text().strip() == "log"
    q = address(page)
    assert (q["folder"], q["result"], q["pair"], q["scale"]) == ("demo/run", "1", "1", "log")
    shot(page, "link-timeline")
