"""Issue 24's leftovers in a real browser: the module tree, one tensor over the run's steps,
path boxes that keep what was typed, Cancel in the middle of a long job, "Written by" on an HF
folder, a large tensor shown from a sample, natural sort on the server, names never cut.

Each test opens its own page (``page`` fixture: no console error allowed, a screenshot of the
end state in test-artifacts/), plus screenshots of the moments that matter.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import BIG_TENSOR, MANY
from ui_pages import count_text, open_path, pick, shot, tab, text, wait_text

pytestmark = pytest.mark.timeout(900)

TREE_ROWS = ".modules .mt-row"


def _tree_labels(page: Any) -> list[str]:
    return [t.strip() for t in page.locator(f"{TREE_ROWS} .mt-label").all_inner_texts()]


def _cells(page: Any, field: str, table: str = ".weight-map") -> list[str]:
    loc = page.locator(f"{table} .tabulator-cell[tabulator-field='{field}']")
    loc.first.wait_for()
    return [c.strip() for c in loc.all_inner_texts() if c.strip()]


def _names_until(page: Any, check: Any, timeout: float = 60) -> list[str]:
    """The weight map's name cells once ``check(names)`` holds (the table follows the
    count by a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        names = _cells(page, "name")
        if check(names):
            return names
        assert time.monotonic() < deadline, names
        time.sleep(0.3)


def test_module_tree_opens_level_by_level_and_filters_exactly(page: Any) -> None:
    """big_a (10,000 tensors): the tree shows a few rows, opens one level per click in
    natural order with each module's size, a click on layer 2 filters exactly its 100
    tensors, a click on a tensor opens its values."""
    open_path(page, "big_a")
    tab(page, "Weight map")
    page.locator(f"{TREE_ROWS}[data-id='model.layers.']").wait_for()
    assert page.locator(TREE_ROWS).count() < 5  # model (opened) and its child only
    page.locator(f"{TREE_ROWS}[data-id='model.layers.'] .mt-caret").click()
    page.locator(f"{TREE_ROWS}[data-id='model.layers.99.']").wait_for()
    labels = _tree_labels(page)
    layers = labels[labels.index("layers") + 1 :]
    assert layers[:12] == [str(i) for i in range(12)]  # 2 before 10, never 1, 10, 11
    assert page.locator(TREE_ROWS).count() == 102  # 100 layers, not 10,000 tensors
    row = page.locator(f"{TREE_ROWS}[data-id='model.layers.2.']")
    assert "100" in (row.get_attribute("title") or "")  # 100 tensors, in its tooltip
    assert "KiB" in row.inner_text() or "MiB" in row.inner_text()
    row.locator(".mt-label").click()
    wait_text(page, "t.includes('100 of 10,000 tensors')")
    names = _names_until(page, lambda n: n and all(x.startswith("model.layers.2.") for x in n))
    assert len(names) == 18  # the first page of 100
    page.locator(f"{TREE_ROWS}[data-id='model.layers.2.block0.']").wait_for()  # opened
    shot(page, "module-tree-layer-2")
    page.locator(f"{TREE_ROWS}[data-id='model.layers.2.block0.'] .mt-caret").click()
    page.locator(f"{TREE_ROWS}[data-id='model.layers.2.block0.w1.'] .mt-caret").click()
    leaf = page.locator(f"{TREE_ROWS}[data-id='model.layers.2.block0.w1.weight']")
    leaf.wait_for()
    assert "32 × 64" in leaf.inner_text()
    leaf.locator(".mt-label").click()
    page.locator("text=2-D slice").first.wait_for()
    wait_text(page, "t.includes('1 of 10,000 tensors')")
    assert "model.layers.2.block0.w1.weight" in text(page)
    shot(page, "module-tree-tensor")


def test_enter_keeps_what_was_typed_and_new_paths_are_offered(page: Any, ui_root: Path) -> None:
    """Enter opens the path typed, not the first suggestion; a folder written after the page
    opened is offered by every box without a reload."""
    box = page.get_by_placeholder("relative to the root").nth(0)
    box.fill("hf_gpt2/")  # suggestions: hf_gpt2/config.json, hf_gpt2/generation_config.json …
    item = page.locator(".pb .item >> visible=true").first
    item.wait_for()
    assert item.inner_text().startswith("hf_gpt2/") and item.inner_text() != "hf_gpt2/"
    box.press("Enter")
    wait_text(page, "/Open: hf_gpt2 /.test(t)")
    assert box.input_value() == "hf_gpt2/"
    # a suggestion chosen with the arrow keys is what Enter then takes
    box.fill("demo/after")
    page.locator(".pb .item >> visible=true", has_text="demo/after_resume").first.wait_for()
    box.press("ArrowDown")
    box.press("Enter")
    wait_text(page, "/Open: demo\\/after_resume /.test(t)")
    assert box.input_value() == "demo/after_resume"
    shot(page, "path-box-enter")
    fresh = f"fresh-{int(time.time() * 1000)}"
    shutil.copytree(ui_root / "demo" / "after_resume", ui_root / fresh)
    try:
        tab(page, "Compare")
        other = page.get_by_placeholder("relative to the root").nth(1)
        other.click()
        other.fill(fresh)
        page.locator(".pb .item >> visible=true", has_text=fresh).first.wait_for(timeout=30_000)
        shot(page, "path-box-new-folder")
    finally:
        shutil.rmtree(ui_root / fresh)


def test_cancel_in_the_middle_of_a_long_diff(page: Any) -> None:
    """A diff of 30,000 tensors shows its progress while it runs; Cancel stops it there:
    a partial result of fewer tensors, said as such, and the page keeps working."""
    tab(page, "Compare")
    pick(page, 1, "many_a/model.safetensors")
    pick(page, 2, "many_b/model.safetensors")
    page.get_by_role("button", name="Compare").click()
    # some bytes compared already (the first progress event says 0 B, before any tensor)
    compared = r"/([0-9.]+) (B|KiB|MiB) of [0-9.]+ (KiB|MiB) compared/.exec(t)"
    wait_text(page, f"(m => m !== null && parseFloat(m[1]) > 0)({compared})")
    assert page.locator("progress >> visible=true").count() >= 1  # the bar, while it runs
    shot(page, "cancel-mid-job-running")
    page.get_by_role("button", name="Cancel").click()
    wait_text(page, "t.includes('cancelled: partial result')", timeout=120_000)
    m = re.search(r"cancelled: partial result — ([0-9,]+) of ([0-9,]+) tensors", text(page))
    assert m is not None, text(page)[-400:]
    done, total = (int(g.replace(",", "")) for g in m.groups())
    assert 0 < done < total == MANY, (done, total)  # stopped in the middle
    shot(page, "cancel-mid-job-cancelled")
    assert page.get_by_role("button", name="Compare").is_enabled()


def test_written_by_says_what_an_hf_folder_states(page: Any, ui_root: Path) -> None:
    """An HF sharded folder records no parallel layout; the card says what its files do say
    (config.json's transformers version, the -of-N shard names), never "not shown"."""
    open_path(page, "hf_gpt2")
    page.locator("text=hf-sharded").first.wait_for()
    config = json.loads((ui_root / "hf_gpt2" / "config.json").read_text())
    version = f"transformers {config['transformers_version']}"
    wait_text(page, "t.includes('Who wrote it')")
    body = text(page)
    card = body[body.upper().index("WRITTEN BY") :][:200]
    assert version in card and "not shown" not in body
    shards = len(list((ui_root / "hf_gpt2").glob("model-*-of-*.safetensors")))
    assert f"{shards} files, whole tensors" in body
    shot(page, "written-by-hf")


def test_large_tensor_detail_gives_exact_figures(page: Any) -> None:
    """A tensor of 24M elements: its detail appears (from a sample first) and ends with the
    exact statistics over every element."""
    open_path(page, "big_tensor/model.safetensors")
    tab(page, "Weight map")
    page.locator(".weight-map .tabulator-cell", has_text="huge.weight").first.click()
    page.locator("text=2-D slice").first.wait_for()
    wait_text(page, "!t.includes('Figures from a sample')", timeout=300_000)
    x = (torch.arange(BIG_TENSOR, dtype=torch.int64) % 997).to(torch.float64)
    body = text(page)
    assert f"{BIG_TENSOR:,} elements" in body
    assert f"{float(x.mean()):.6g}" in body  # the exact mean over every element
    assert "L2 when every element is read" not in body
    shot(page, "large-tensor-detail")


def test_server_side_sort_is_natural_and_names_are_whole(page: Any) -> None:
    """The weight map pages on the server: sorting its names puts layers.2 before layers.10
    (not 0, 1, 10, 11 ...), and no name or file cell is cut."""
    open_path(page, "big_a")
    tab(page, "Weight map")
    page.get_by_placeholder("e.g. layers.3.").fill("block0.w0.weight")
    wait_text(page, "t.includes('100 of 10,000 tensors')")
    header = page.locator(".weight-map .tabulator-col[tabulator-field='name']").first
    header.locator(".tabulator-col-title").click()
    deadline = time.monotonic() + 60
    while True:
        names = _cells(page, "name")
        layers = [int(n.split(".")[2]) for n in names if n.startswith("model.layers.")]
        if layers[:3] == [0, 1, 2] or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert layers == list(range(18)), layers
    cut = page.evaluate(
        """() => { const out = []; const walk = (n) => { if (n.shadowRoot) walk(n.shadowRoot);
          for (const c of n.children) walk(c);
          if (n.classList && n.classList.contains('tabulator-cell')) {
            const f = n.getAttribute('tabulator-field');
            if ((f === 'name' || f === 'file') && n.scrollWidth > n.clientWidth + 1)
              out.push(n.textContent); } };
          walk(document.body); return out; }"""
    )
    assert cut == [], cut
    shot(page, "natural-sort-server")


def test_one_tensor_over_the_runs_steps(page: Any, ui_root: Path) -> None:
    """The demo's run: the Timeline shows one tensor's values at each step on common bins;
    the heatmap's columns are those steps' histograms (shares equal to the files')."""
    from ckpt_explorer.timeline import build_timeline
    from ckpt_explorer.timeline.distribution import tensor_distribution

    tab(page, "Timeline")
    page.get_by_role("button", name="Build").click()
    wait_text(page, "t.includes('3 checkpoints, 2 pairs')", timeout=300_000)
    name = "modeling/layers.0.self_attn.in_proj_weight"
    box = page.get_by_placeholder("a tensor of the run")
    box.fill(name)
    box.press("Enter")
    wait_text(page, "t.includes('3 checkpoints ·')", timeout=120_000)
    z = page.evaluate(
        """() => { let found = null; const walk = (n) => { if (found) return;
          if (n.shadowRoot) walk(n.shadowRoot);
          if (n.classList && n.classList.contains('js-plotly-plot') && n.data
              && n.data[0] && n.data[0].type === 'heatmap' && n.layout.yaxis.title
              && n.layout.yaxis.title.text === 'value') { found = n.data[0]; return; }
          for (const c of n.children) walk(c); };
          walk(document.body); return found && {x: found.x, z: found.z}; }"""
    )
    assert z is not None and [str(s) for s in z["x"]] == ["2", "4", "6"]
    truth = tensor_distribution(build_timeline(ui_root / "demo" / "run"), name)
    for j, counts in enumerate(truth.counts):
        shares = [row[j] or 0.0 for row in z["z"]]
        assert shares == pytest.approx([c / sum(counts) for c in counts], abs=1e-12)
    page.locator("text=3 checkpoints ·").first.scroll_into_view_if_needed()
    shot(page, "tensor-over-steps")


def test_weight_map_counts_and_pages_a_large_filter(page: Any) -> None:
    """Paging a filtered view says where it is and keeps the filter (the rows come from the
    kept query: a page change filters nothing again)."""
    open_path(page, "big_a")
    tab(page, "Weight map")
    page.get_by_placeholder("e.g. layers.3.").fill("w3")
    wait_text(page, "t.includes('2,500 of 10,000 tensors')")
    page.locator(".weight-map .tabulator-page[data-page='next']").first.click()
    wait_text(page, "t.includes('page 2 of 139')")
    names = _names_until(page, lambda n: n and all("w3" in x for x in n))
    assert len(names) == 18 and count_text(page).startswith("2,500 of 10,000 tensors")
