"""Calls made from a job's thread, run on the notebook kernel's own thread.

In a notebook (no Bokeh server session) Panel sends each change of a widget to the browser
from whatever thread makes it. A job's thread and the kernel's thread (a click, a table's
page size) sending at once interleave their messages and lose updates: a job's result
never drawn. So a job's thread hands its changes to a :class:`Mailbox` of the thread that
made the state or started the job; the kernel's event loop runs them there, in order.

Elsewhere (a served page: its session already runs changes on its own loop; plain Python,
tests: no event loop running) the mailbox calls at once, as it always did.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

_log = logging.getLogger(__name__)
_boxes: dict[int, Mailbox] = {}
_boxes_lock = threading.Lock()


class Mailbox:
    """Runs calls on its owner thread: at once there; from another thread, queued and run
    by the owner's event loop (``loop`` None: at once, whichever thread calls)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.loop = loop
        self.owner = threading.get_ident()
        self._queue: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` on the owner thread: at once there, else queued for its loop."""
        if self.loop is None or threading.get_ident() == self.owner:
            fn(*args)
            return
        self._queue.append((fn, args))
        with contextlib.suppress(RuntimeError):  # a closed loop: no kernel left to show it
            self.loop.call_soon_threadsafe(self.drain)

    def drain(self) -> None:
        """Run what other threads queued; on the owner thread only (elsewhere nothing)."""
        if threading.get_ident() != self.owner:
            return
        while True:
            try:
                fn, args = self._queue.popleft()
            except IndexError:
                return
            try:
                fn(*args)
            except Exception:  # one failed update must not keep the later ones queued
                _log.exception("a job's update failed")


def in_kernel() -> bool:
    """Whether this runs in a Jupyter kernel (a served page's loop is the server's, not this)."""
    import sys

    # IPython may be half imported by another thread (a served page's warm-up): no kernel then
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    ip = get_ipython() if callable(get_ipython) else None
    return getattr(ip, "kernel", None) is not None


def _kernel_loop() -> asyncio.AbstractEventLoop | None:
    """The running event loop of this thread when it is a notebook kernel's (not a served
    page's session, which orders its own changes); None elsewhere."""
    import panel as pn

    doc = pn.state.curdoc
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    if not in_kernel() or (doc is not None and doc.session_context is not None):
        return None
    return loop


def mailbox() -> Mailbox:
    """The mailbox of the calling thread: queued for its event loop in a notebook's kernel,
    direct elsewhere (a served page, plain Python, no running event loop)."""
    loop = _kernel_loop()
    if loop is None:
        return Mailbox(None)
    me = threading.get_ident()
    with _boxes_lock:  # one per thread: updates of one job stay in the order they were made
        box = _boxes.get(me)
        if box is None or box.loop is not loop:
            box = _boxes[me] = Mailbox(loop)
        return box


def after_message(fn: Callable[[], Any]) -> None:
    """``fn()`` once the browser message being handled is applied whole.

    In a notebook Panel applies a comm message with its document held: a widget's new value
    in it (a text box committed as it lost the focus to a button) reaches Python when the
    message ends, while a button's click in the same message is handled at once, so the
    click's handler would read the form as it was before. In a kernel the call waits for its
    event loop's next turn (the message handled by then); elsewhere (a served page, even one
    served from a kernel, applies a message's changes in order; plain Python) it runs at
    once."""
    loop = _kernel_loop()
    if loop is None:
        fn()
        return
    loop.call_soon(fn)
