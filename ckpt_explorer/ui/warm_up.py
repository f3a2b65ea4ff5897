"""A served dashboard's warm-up: what a first Compare, tensor detail or tab would load, done
in a background thread one step at a time, each step only while nothing else runs.

Busy means: a page asked for and not yet drawn in its browser (:func:`page_loading`,
:func:`page_drawn`), a job, a page's background work or a result handed to its session
(:func:`working`, :func:`hold`), or a
session callback running (Panel's ``state.busy``). The warm-up waits before each step until
none is for :data:`QUIET_S`; a step under way is not interrupted (an import cannot be), so
steps are single imports or loads, and a job that needs the same module waits only for that
import, which it would have paid itself.
"""

from __future__ import annotations

import itertools
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

Step = tuple[str, Callable[[], Any]]
QUIET_S = 0.1  # nothing busy this long before the next step starts
POLL_S = 0.05
PAGE_S = 30.0  # a page never drawn (its tab closed while loading) stops counting after this

_lock = threading.Lock()
_until: dict[int, float] = {}  # what keeps the server busy: id → when it stops counting
_pages: list[int] = []  # ids of the pages being built or loaded, oldest first
_ids = itertools.count()
_started = threading.Event()
done: list[str] = []  # the steps run, in order (what tests read)


def _begin(limit_s: float = math.inf) -> int:
    key = next(_ids)
    with _lock:
        _until[key] = time.monotonic() + limit_s
    return key


def _end(key: int) -> None:
    with _lock:
        _until.pop(key, None)


@contextmanager
def working() -> Iterator[None]:
    """The server is busy with a user's work (a job, a page's background load) meanwhile."""
    key = _begin()
    try:
        yield
    finally:
        _end(key)


def hold(limit_s: float = PAGE_S) -> Callable[[], None]:
    """Busy until the function returned is called (or ``limit_s``): work handed on to
    another thread, such as a job's result scheduled on a page's event loop."""
    key = _begin(limit_s)
    return lambda: _end(key)


def page_loading() -> None:
    """A page was asked for: busy until it is drawn (:func:`page_drawn`) or :data:`PAGE_S`."""
    key = _begin(PAGE_S)
    with _lock:
        _pages.append(key)


def page_drawn() -> None:
    """A page is drawn in its browser: the oldest page still loading no longer counts."""
    with _lock:
        if _pages:
            _until.pop(_pages.pop(0), None)


def busy() -> bool:
    """Whether a page loads, a job runs or a session callback runs."""
    now = time.monotonic()
    with _lock:
        for key in [k for k, until in _until.items() if until < now]:
            del _until[key]
        if _until:
            return True
    pn = sys.modules.get("panel")
    return bool(pn is not None and pn.state.busy)


def wait_idle(quiet_s: float = QUIET_S) -> None:
    """Return once nothing was busy for ``quiet_s`` in a row."""
    since: float | None = None
    while True:
        now = time.monotonic()
        if busy():
            since = None
        elif since is None:
            since = now
        elif now - since >= quiet_s:
            return
        time.sleep(POLL_S)


def run(steps: Sequence[Step]) -> None:
    """Each step in order, each once nothing is busy; a failing step is skipped (the view
    that needs it says why when it loads it itself)."""
    for name, step in steps:
        wait_idle()
        with suppress(Exception):
            step()
        done.append(name)


def start(steps: Sequence[Step]) -> bool:
    """:func:`run` in a daemon thread, once per process; False when it was started before."""
    with _lock:
        if _started.is_set():
            return False
        _started.set()
    threading.Thread(target=run, args=(steps,), name="ckpt-explorer-warm", daemon=True).start()
    return True
