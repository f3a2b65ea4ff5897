"""One unit per kind of column across the views (issue 35, item 4: raw bytes in one
column, KiB in the next): every byte column of every table is drawn in binary units by one
formatter, which writes what ``fmt_bytes`` writes, and no table also carries a text copy."""

from __future__ import annotations

import re
from typing import Any

import panel as pn
import pytest
from bokeh.document import Document

from ckpt_explorer.ui.components.common import BYTE_COLUMNS, JS_BYTES
from ckpt_explorer.ui.numbers import fmt_bytes

HUMAN = re.compile(r"^\d[\d.,]* (B|KiB|MiB|GiB|TiB)$")


@pytest.fixture(scope="module")
def views(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """Every view of the dashboard built over the demo, the Compare run (its table shown)."""
    from ckpt_explorer.demo import make_demo
    from ckpt_explorer.ui.layout import create_app, tab_class
    from ckpt_explorer.ui.tabs import TAB_CLASSES

    root = tmp_path_factory.mktemp("units")
    make_demo(root / "demo")
    app = create_app(paths=[root / "demo/resumed_from", root / "demo/after_resume"], root=root)
    state = app.state  # type: ignore[attr-defined]
    state.compare.run(wait=True)
    built = [tab_class(spec)(app=state) for _, spec in TAB_CLASSES]
    for v in built:
        pn.panel(v).get_root(Document())
    return built


def _tables(views: list[Any]) -> list[pn.widgets.Tabulator]:
    found: list[pn.widgets.Tabulator] = []
    for v in views:
        found += pn.panel(v).select(pn.widgets.Tabulator)
    return found


def test_every_byte_column_has_the_one_binary_formatter(views: list[Any]) -> None:
    tables = _tables(views)
    byte_tables = [t for t in tables if set(map(str, t.value.columns)) & set(BYTE_COLUMNS)]
    assert len(byte_tables) >= 3, [list(t.value.columns) for t in tables]  # Overview, Weight map...
    for t in byte_tables:
        for col in map(str, t.value.columns):
            if col in BYTE_COLUMNS:
                fmt = t.formatters.get(col)
                assert getattr(fmt, "js_code", fmt) == JS_BYTES, (col, list(t.value.columns))
            else:  # no text column of sizes beside the numbers
                texts = [x for x in t.value[col].head(50) if isinstance(x, str)]
                assert not (texts and all(HUMAN.match(x) for x in texts)), (col, texts[:3])


def test_the_formatter_writes_what_fmt_bytes_writes(browser: Any) -> None:
    values = [0, 12, 1023, 1024, 1536, 5 * 2**20, 252 * 2**20 + 12345, 74.5 * 2**30, 3 * 2**40]
    page = browser.new_page()
    try:
        shown = page.evaluate(
            f"(vs) => {{ const f = {JS_BYTES}; return vs.map((v) => f({{getValue: () => v}})); }}",
            values,
        )
    finally:
        page.close()
    assert shown == [fmt_bytes(v) for v in values]
