"""Many shards in the Weight map's chart, in a real browser against ``panel serve``: 42
safetensors shards (issue 35: their names smeared into one another) are drawn one bar per
line, largest first, no label box over another, the chart inside its card."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import ConsoleLog, serve_app
from ui_pages import shot

pytestmark = pytest.mark.timeout(900)
SHARDS = 42


@pytest.fixture(scope="module")
def shards_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An HF-style index over 42 shards of different sizes (safetensors' own writer)."""
    import torch
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("many_shards")
    folder = root / "sharded"
    folder.mkdir()
    weight_map = {}
    for i in range(SHARDS):
        shard = f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors"
        name = f"model.layers.{i}.mlp.weight"
        save_file({name: torch.zeros(64, 16 * ((i * 37) % SHARDS + 1))}, str(folder / shard))
        weight_map[name] = shard
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with serve_app(root, [folder], "panel-serve-shards.log") as url:
        yield url


def test_many_shards_are_drawn_one_per_line_largest_first(browser: Any, shards_app: str) -> None:
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(120_000)
    console = ConsoleLog(page)
    page.goto(shards_app + "?tab=Weight+map")
    labels = page.locator(".ck-hbars .ck-scroll text[text-anchor='end']")
    labels.first.wait_for()
    boxes = labels.evaluate_all(
        "els => els.map(e => { const r = e.getBBox(); return [r.y, r.y + r.height]; })"
    )
    assert len(boxes) == SHARDS
    assert all(b[0] >= a[1] for a, b in itertools.pairwise(boxes)), boxes
    widths = page.locator(".ck-hbars rect.mark").evaluate_all(
        "els => els.map(e => e.getBBox().width)"
    )
    assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]
    chart = page.locator(".ck-hbars").first.bounding_box()
    card = page.locator(".ck-hbars").first.evaluate(
        "e => { let n = e; while (n && !(n.classList && n.classList.contains('card'))) "
        "n = n.parentNode || n.host; return n ? n.getBoundingClientRect().right : null; }"
    )
    assert chart is not None and (card is None or chart["x"] + chart["width"] <= card + 1)
    # the sizes, in binary units, whole in their column (no "152 …")
    cells = page.locator(".weight-map .tabulator-cell[tabulator-field='bytes']")
    fits = cells.evaluate_all("els => els.map(e => [e.innerText, e.scrollWidth <= e.clientWidth])")
    assert fits and all(ok and t.endswith("iB") for t, ok in fits), fits
    shot(page, "many-shards")
    context.close()
    assert console.errors == [], console.errors
