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
    import shutil

    from ckpt_explorer.demo import make_demo

    root = tmp_path_factory.mktemp("links_browser")
    make_demo(root / "demo")
    # the same state with its optimizer lost: a warning about the state as a whole
    shutil.copytree(root / A, root / "no_optim", ignore=shutil.ignore_patterns("optimizer"))
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


def test_a_compare_link_draws_its_ab_view(opened: Any) -> None:
    """The link's A/B view is drawn even when its diff ends while the browser is still
    drawing the page (Panel dropped the result then; see test_ui_session_ready.py). First
    in the module: the first page of a fresh server, whose diff is the slowest."""
    page = opened(f"?tab=Compare&a={A}&b={B}&ab={AB_TENSOR}&result=1")
    page.locator("text=Verdict").first.wait_for()
    wait_text(page, "t.includes('Histograms of A and B') && t.includes('Histogram of A − B')")


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


# ---- visible without scrolling sideways (issue 35, item 4) ----------------------------------

INSIDE = """([scope, sel]) => {
  const find = (root, s) => { const out = []; const walk = (n) => {
    if (n.shadowRoot) walk(n.shadowRoot);
    for (const c of n.children || []) { if (c.matches && c.matches(s)) out.push(c); walk(c); }
  }; walk(root); return out; };
  const els = sel ? find(document.body, scope).flatMap((h) => find(h, sel))
                  : find(document.body, scope);
  return els.map((e) => { const r = e.getBoundingClientRect(); const st = getComputedStyle(e);
    return {left: r.left, right: r.right, top: r.top, height: r.height, text: e.innerText,
            html: e.innerHTML, lh: parseFloat(st.lineHeight) || 16, sw: e.scrollWidth,
            cw: e.clientWidth, border: st.borderLeftColor}; }); }"""


def boxes(page: Any, scope: str, selector: str = "") -> list[dict[str, Any]]:
    """Bounding boxes (and a few computed styles) of the elements matching ``selector``
    inside those matching ``scope`` (or of ``scope`` itself), through Panel's shadow roots."""
    return list(page.evaluate(INSIDE, [scope, selector]))


# Tabulator draws its header 10 px right of the rows' scroll box (the hidden index column's
# border and padding): a column is inside when it ends within that much of the box's edge
HEADER_SHIFT = 12


def assert_no_sideways_scroll(page: Any, scope: str) -> None:
    """The table's rows are no wider than the table: nothing hidden to the right."""
    holders = boxes(page, scope, ".tabulator-tableholder")
    assert holders and all(h["sw"] <= h["cw"] + 1 for h in holders), holders


def test_findings_fit_the_page_and_say_where_they_lead(opened: Any) -> None:
    """Validate a training state whose optimizer state was lost: the hint column lies
    inside the findings table (the fix beside its finding), the Warning card's border is
    amber, and clicking a finding that names no tensor, or an index, says why."""
    page = opened("?tab=Validate&ckpt=no_optim")
    page.get_by_role("button", name="Validate").click()
    page.locator("text=Findings (worst first)").first.wait_for()
    page.locator(".findings .tabulator-cell[tabulator-field='hint']").first.wait_for()
    table = boxes(page, ".findings", ".tabulator-tableholder")[0]
    assert_no_sideways_scroll(page, ".findings")
    hints = boxes(page, ".findings", ".tabulator-cell[tabulator-field='hint']")
    assert hints and all(
        table["left"] <= h["left"] and h["right"] <= table["right"] + HEADER_SHIFT for h in hints
    ), (table, hints)
    heads = [h for h in boxes(page, ".findings", ".tabulator-col") if h["right"] > h["left"]]
    assert heads and max(h["right"] for h in heads) <= table["right"] + HEADER_SHIFT
    assert table["right"] <= 1500
    cards = {c["text"].split("\n")[0].strip().lower(): c["border"] for c in boxes(page, ".card")}
    assert cards.get("warning") == "rgb(245, 158, 11)", cards  # amber, not green or blue
    # a finding about the whole checkpoint (no tensor, no file): a word, not a dead click
    page.locator(".findings .tabulator-row", has_text="warning").first.locator(
        ".tabulator-cell[tabulator-field='rule']"
    ).click()
    page.locator(".why", has_text="as a whole").first.wait_for()
    # an index file: it holds no tensor, said so, no empty weight map
    page.locator(
        ".findings .tabulator-cell[tabulator-field='file']", has_text="index"
    ).first.click()
    page.locator(".why", has_text="is an index").first.wait_for()
    assert address(page)["tab"] == "Validate"
    shot(page, "validate-fits")


def test_optimizer_groups_show_every_column(opened: Any) -> None:
    page = opened("?tab=Optimizer")
    page.locator(".param-groups .tabulator-col[tabulator-field='initial_lr']").first.wait_for()
    table = boxes(page, ".param-groups", ".tabulator-tableholder")[0]
    assert_no_sideways_scroll(page, ".param-groups")
    heads = [h for h in boxes(page, ".param-groups", ".tabulator-col") if h["right"] > h["left"]]
    assert len(heads) >= 8
    assert all(
        table["left"] - 1 <= h["left"] and h["right"] <= table["right"] + HEADER_SHIFT
        for h in heads
    ), (table, [(h["text"], h["right"]) for h in heads])
    lr = boxes(page, ".param-groups", ".tabulator-col[tabulator-field='initial_lr']")[0]
    assert lr["right"] <= table["right"] + HEADER_SHIFT and lr["left"] >= table["left"]
    buttons = boxes(page, ".export", "button, a")
    assert buttons and all(b["sw"] <= b["cw"] + 1 for b in buttons), buttons  # JSON whole
    shot(page, "optimizer-fits")


def test_weight_map_names_and_files_wrap_at_their_separators(opened: Any) -> None:
    page = opened("?tab=Weight+map")
    page.locator(".weight-map .tabulator-cell[tabulator-field='file']").first.wait_for()
    names = boxes(page, ".weight-map", ".tabulator-cell[tabulator-field='name']")
    assert names and not any("_<wbr>" in n["html"] or "-<wbr>" in n["html"] for n in names)
    files = boxes(page, ".weight-map", ".tabulator-cell[tabulator-field='file']")
    # a shard's name under its folder: at most two lines (padding aside)
    assert all(f["height"] <= 2 * f["lh"] + 16 for f in files), [
        (f["text"], f["height"], f["lh"]) for f in files
    ]
    table = boxes(page, ".weight-map", ".tabulator-tableholder")[0]
    assert_no_sideways_scroll(page, ".weight-map")
    assert all(f["right"] <= table["right"] + 1 for f in files)
    shot(page, "weight-map-fits")
