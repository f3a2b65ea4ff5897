"""Results read whole in a narrow window (1000 px, the width of a notebook's output): after a
Compare, a Validate and a Convert plan and run in the served page, no table cell or title is
cut, no word is split mid-line, no table scrolls sideways and no column passes the page's
right edge (``CUT_TEXT`` of ui_pages, the check the notebook tests run); Compare's row click
still opens the A/B view. Screenshots in test-artifacts/ (``ui-narrow-*.png``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import ConsoleLog
from ui_pages import ARTIFACTS, cut_text, shot, tab, wait_text

pytestmark = pytest.mark.timeout(900)

NARROW = {"width": 1000, "height": 1000}
MAIN = "#main"  # the served page's column of views, beside the sidebar


@pytest.fixture
def narrow(browser: Any, served_app: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh page on the app in a 1000 px window; no console errors allowed."""
    context = browser.new_context(viewport=NARROW)
    pg = context.new_page()
    pg.set_default_timeout(90_000)
    log = ConsoleLog(pg)
    pg.goto(served_app)
    pg.wait_for_selector("text=Why this is", timeout=120_000)
    yield pg
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"ui-{request.node.name}-end.png"))
    context.close()
    assert log.errors == [], "the page reported errors:\n" + "\n".join(log.errors)


def whole(page: Any, table: str, name: str) -> None:
    """The table ``table`` (a CSS class) scrolled into view, then every table on screen checked:
    nothing cut, at least one table seen."""
    page.locator(f".{table}").first.evaluate("(e) => e.scrollIntoView({block: 'start'})")
    time.sleep(1.0)  # let the table settle on its widths
    shot(page, f"narrow-{name}")
    cut, tables = cut_text(page, MAIN)
    assert tables >= 1, f"no table on screen after {name}"
    assert cut == [], f"{name}:\n" + "\n".join(c[:300] for c in cut)


def test_compare_result_fits_a_narrow_page(narrow: Any) -> None:
    """Every column of Compare's table within the page, the parameter column included, text
    wrapped whole (the values that differ too); a click on a row then opens its tensor in A
    and B."""
    page = narrow
    tab(page, "Compare")
    page.get_by_role("button", name="Compare").click()
    page.locator("text=Verdict").first.wait_for()
    # the name, the first column, never folds under its row: drawn in every layout
    page.locator(
        ".diff-table .tabulator-row .tabulator-cell[tabulator-field='name']"
    ).first.wait_for()
    whole(page, "diff-table", "compare")
    whole(page, "values-table", "compare-values")  # the demo's steps and lr differ
    matrix = page.locator(".diff-table .tabulator-row", has_text="×").first  # a 2-D tensor
    matrix.locator(".tabulator-cell[tabulator-field='name']").click()
    wait_text(
        page,
        "t.includes('Histograms of A and B') && t.includes('Histogram of A − B') "
        "&& t.includes('one colour scale')",
    )
    page.locator(".ab-title").first.scroll_into_view_if_needed()
    shot(page, "narrow-compare-ab")


def test_validate_result_fits_a_narrow_page(narrow: Any) -> None:
    """Validate's findings: rule ids, messages and hints wrapped whole (a rule id breaks only
    after "." or "_")."""
    page = narrow
    tab(page, "Validate")
    page.get_by_role("button", name="Validate").click()
    page.locator("text=Findings (worst first)").first.wait_for()
    page.locator(".findings .tabulator-cell[tabulator-field='rule']").first.wait_for()
    whole(page, "findings", "validate")


def test_convert_result_fits_a_narrow_page(narrow: Any) -> None:
    """Convert's plan and its run's result read whole."""
    page = narrow
    tab(page, "Convert")
    out = f"narrow-{int(time.time() * 1000)}"
    page.get_by_placeholder("e.g. model-hf").fill(out)
    page.locator("input[type=checkbox]").first.check()  # the demo's model weights only
    page.get_by_role("button", name="Plan").click()
    page.locator("text=Byte copy").first.wait_for()
    whole(page, "plan-table", "convert-plan")
    page.get_by_role("button", name="Run conversion").click()
    page.locator("text=Verified bit for bit").first.wait_for(timeout=180_000)
    whole(page, "plan-table", "convert-run")
