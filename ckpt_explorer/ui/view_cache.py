"""Checkpoints opened once per server, and what the pages build from them, shared by sessions.

A 90k-tensor checkpoint takes a second to list and its weight map, filter and module tree a
second more; every browser tab of a served dashboard shows the same ones. :func:`open_view`
keeps the last few views opened, reused while none of their files changed (size and
modification time of each file, and of the folder); :func:`memo` keeps what is built from a
view (tables, indexes, findings) for as long as the view lives. ``serve`` opens the paths it
was given in the background at start (:func:`prefetch`) with the Overview's and Weight map's
tables, so the first page finds them ready. Then it warms what a first Compare, tensor
detail or tab needs (numba, plotly, torch, the views' modules, the security verdicts: seconds
of a core) through :mod:`.warm_up`, one step at a time while no page loads and nothing else
runs; a page asked for within two seconds of the server listening is built and drawn first.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..view import CheckpointView
from .warm_up import Step, page_drawn, page_loading, start

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
IDLE_S = 2.0  # no page asked for this long after the server listens: it is idle


def listening() -> None:
    """The server answers: the idle clock of :func:`prefetch` starts."""
    _listening.set()


def page_asked() -> None:
    """A browser asked for a page (its session is being built): busy until it is drawn."""
    page_loading()
    _page_asked.set()


def page_loaded() -> None:
    """A page is drawn in a browser: it no longer keeps the warm-up waiting."""
    page_drawn()


def prefetch(
    paths: list[str],
    first: Callable[[CheckpointView], Any] | None = None,
    warm: Callable[[CheckpointView], Sequence[Step]] | None = None,
    wait_s: float = 20.0,
) -> None:
    """In a background thread: open the first of ``paths`` and run ``first`` on its view
    (what the first page needs). Then, once the server listens (:func:`listening`, or
    ``wait_s`` after the first work) and a page was asked for (:func:`page_asked`) or
    :data:`IDLE_S` passed without one, the steps of ``warm(view)`` through
    :func:`.warm_up.start`: each once no page loads and nothing else runs, so none competes with a page's or a job's steps for the
    interpreter. Errors are left for the page to show when it opens the path itself."""
    from ..remote.urls import is_url

    local = [p for p in paths if not is_url(str(p))]
    if not local:
        return

    def work() -> None:
        try:
            view = open_view(local[0])
            if first is not None:
                first(view)
            _listening.wait(wait_s)
            _page_asked.wait(IDLE_S)  # a page asked for at once is built before any step
            if warm is not None:
                start(warm(view))
        except Exception:  # the page opens it again and shows the error
            return

    threading.Thread(target=work, name="ckpt-explorer-prefetch", daemon=True).start()
