"""A job that ends while the browser is still drawing the page waits for the page to be up.

Panel 1.9 drops the changes a layout makes between the browser's pull of the document and
its "document ready" (it counts on a full serialization, already sent): a link's Compare
that ended then left the page without its result. ``in_session`` defers such updates to
Panel's on-load callbacks. The browser side is ``test_a_compare_link_draws_its_ab_view``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import panel as pn
import pytest
from bokeh.document import Document
from panel.io.state import set_curdoc

from ckpt_explorer.ui.components.common import in_session


class _Session:
    """Stands for a served page's session context (only its presence is read)."""


@pytest.fixture
def served_doc() -> Iterator[tuple[Document, list[Callable[[], None]]]]:
    """A document of a served page (a session context) whose next-tick callbacks are
    collected rather than run, so the test runs them when it likes."""
    doc = Document()
    session = _Session()
    doc._session_context = lambda: session  # type: ignore[assignment]
    ticks: list[Callable[[], None]] = []
    doc.add_next_tick_callback = ticks.append  # type: ignore[assignment,method-assign]
    try:
        yield doc, ticks
    finally:
        for registry in (pn.state._loaded, pn.state._connected, pn.state._onload):
            registry.pop(doc, None)  # type: ignore[attr-defined]


def _from_a_thread(fn: Callable[..., Any], *args: Any) -> None:
    worker = threading.Thread(target=fn, args=args)
    worker.start()
    worker.join()


def test_an_update_from_a_job_waits_until_the_page_is_up(
    served_doc: tuple[Document, list[Callable[[], None]]],
) -> None:
    doc, ticks = served_doc
    seen: list[str] = []
    with set_curdoc(doc):
        update = in_session(seen.append)
    _from_a_thread(update, "result")  # a job ends while the browser draws the page
    assert len(ticks) == 1
    ticks.pop()()
    assert seen == []  # not applied now: Panel would drop the page's change
    pn.state._on_load(doc)  # the browser says the page is drawn
    assert seen == ["result"]
    _from_a_thread(update, "next")  # once up, the next tick applies it
    ticks.pop()()
    assert seen == ["result", "next"]


def test_updates_held_for_the_page_keep_their_order(
    served_doc: tuple[Document, list[Callable[[], None]]],
) -> None:
    doc, ticks = served_doc
    seen: list[int] = []
    with set_curdoc(doc):
        update = in_session(seen.append)
    for i in range(3):
        _from_a_thread(update, i)
    for tick in list(ticks):
        tick()
    assert seen == []
    pn.state._on_load(doc)
    assert seen == [0, 1, 2]
