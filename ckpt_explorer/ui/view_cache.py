"""Checkpoints opened once per server, and what the pages build from them, shared by sessions.

A 90k-tensor checkpoint takes a second to list and its weight map, filter and module tree a
second more; every browser tab of a served dashboard shows the same ones. :func:`open_view`
keeps the last few views opened, reused while none of their files changed (size and
modification time of each file, and of the folder); :func:`memo` keeps what is built from a
view (tables, indexes, findings) for as long as the view lives. ``serve`` opens the paths it
was given in the background at start (:func:`prefetch`) with the Overview's and Weight map's
tables, so the first page finds them ready. When no page is asked for within two seconds of
the server listening, it is idle: it goes on at once with the security verdicts and what a tensor detail or a
first Compare needs (torch, numba, plotly: seconds of a core), so a page opened later waits
for none of it. A page asked for sooner goes first: the verdicts wait until it is up, the
rest until a Weight map is shown (seconds a page's first steps would wait behind).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..view import CheckpointView

T = TypeVar("T")
KEEP = 4  # views kept open
_views: OrderedDict[str, tuple[tuple[Any, ...], CheckpointView]] = OrderedDict()
_built: weakref.WeakKeyDictionary[CheckpointView, dict[str, Any]] = weakref.WeakKeyDictionary()
_locks: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def _stat(p: Path) -> tuple[int, int]:
    try:
        st = os.stat(p)
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)


def identity(path: Path, view: CheckpointView | None) -> tuple[Any, ...]:
    """What must stay the same for ``view`` of ``path`` to be reused: the path's own size and
    time (a folder's time changes when a file is added or removed) and each file's."""
    own = _stat(path)
    if view is None or not path.is_dir():
        return (own,)
    return (own, *(_stat(path / f.path) for f in view.files))


def _lock(key: str) -> threading.Lock:
    with _guard:
        return _locks.setdefault(key, threading.Lock())


def open_view(path: str | Path) -> CheckpointView:
    """``open_checkpoint(path)``, or the view opened before when nothing changed since.

    Raises:
        CkptExplorerError: as :func:`~ckpt_explorer.api.open_checkpoint`.
    """
    from ..api import open_checkpoint

    real = Path(path)
    key = str(real)
    with _lock(key):
        kept = _views.get(key)
        if kept is not None and identity(real, kept[1]) == kept[0]:
            with _guard:
                _views.move_to_end(key)
            return kept[1]
        view = open_checkpoint(real)
        with _guard:
            _views[key] = (identity(real, view), view)
            _views.move_to_end(key)
            while len(_views) > KEEP:
                _views.popitem(last=False)
        return view


def memo(view: CheckpointView, what: str, build: Callable[[], T]) -> T:
    """``build()`` once per ``view`` and ``what`` (two pages asking at once build it once)."""
    with _guard:
        built = _built.setdefault(view, {})
        lock = built.setdefault(f"lock:{what}", threading.Lock())
    with lock:
        if what not in built:
            built[what] = build()
        return built[what]  # type: ignore[no-any-return]


_listening = threading.Event()
_page_asked = threading.Event()
_page_up = threading.Event()
_weights_up = threading.Event()
_waiting: list[str] = []  # prefetches waiting for a page
SETTLE_S = 1.0  # after a Weight map is built: its table drawn before the last work starts
IDLE_S = 2.0  # no page asked for this long after the server listens: it is idle


def listening() -> None:
    """The server answers: the idle clock of :func:`prefetch` starts."""
    _listening.set()


def page_asked() -> None:
    """A browser asked for a page (its session is being built)."""
    _page_asked.set()


def page_loaded() -> bool:
    """A page is up in a browser: the background work that waited for it starts. True when
    such work was waiting (a served page's next work is then under way)."""
    waited = bool(_waiting)
    _page_up.set()
    return waited


def weights_shown() -> None:
    """A Weight map is on a page: the background work that waited for one starts."""
    _weights_up.set()


def prefetch(
    paths: list[str],
    first: Callable[[CheckpointView], Any] | None = None,
    then: Callable[[CheckpointView], Any] | None = None,
    last: Callable[[], Any] | None = None,
    wait_s: float = 20.0,
) -> None:
    """In a background thread: open the first of ``paths`` and run ``first`` on its view
    (what the first page needs). Then, when no page is asked for (:func:`page_asked`) within
    :data:`IDLE_S` of the server listening (:func:`listening`, or ``wait_s`` after the first
    work), ``then`` and ``last`` at once (the server is idle). Otherwise, once that
    page is up (:func:`page_loaded`, or after ``wait_s``), ``then`` (what the page needs
    next), and once a Weight map is shown (:func:`weights_shown`, or ``wait_s`` later)
    ``last``, so none competes with the first page's steps for the interpreter. Errors are
    left for the page to show when it opens the path itself."""
    from ..remote.urls import is_url

    local = [p for p in paths if not is_url(str(p))]
    if not local:
        return

    def work() -> None:
        try:
            view = open_view(local[0])
            if first is not None:
                first(view)
            _waiting.append(local[0])
            _listening.wait(wait_s)
            idle = not _page_asked.wait(IDLE_S)
            if not idle:
                _page_up.wait(wait_s)
            if then is not None:
                then(view)
            if last is not None:
                if not idle and _weights_up.wait(wait_s):
                    time.sleep(SETTLE_S)
                last()
        except Exception:  # the page opens it again and shows the error
            return
        finally:
            _waiting.clear()

    threading.Thread(target=work, name="ckpt-explorer-prefetch", daemon=True).start()
