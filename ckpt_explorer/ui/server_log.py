"""A served page's close leaves no traceback in the server log.

When a browser tab closes while the server is writing to its websocket, Tornado's
``write_message`` future fails with ``WebSocketClosedError``; Bokeh and Panel schedule those
writes without awaiting them, so asyncio logs "Task exception was never retrieved" with a
two-part traceback for every such page. The write was for a page that is gone: nothing is
lost. :func:`quiet_closed_sockets` drops exactly those reports on the server's event loop
and passes every other one on.
"""

from __future__ import annotations

import asyncio
from typing import Any

_MARK = "_ckpt_explorer_quiet"


def _closed_socket(context: dict[str, Any]) -> bool:
    from tornado.iostream import StreamClosedError
    from tornado.websocket import WebSocketClosedError

    error = context.get("exception")
    if error is None:
        future = context.get("future")
        if isinstance(future, asyncio.Future) and future.done() and not future.cancelled():
            error = future.exception()
    return isinstance(error, WebSocketClosedError | StreamClosedError)


def quiet_closed_sockets() -> None:
    """On the running event loop (once): unretrieved websocket-closed errors are dropped."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        try:
            from tornado.ioloop import IOLoop

            loop = IOLoop.current().asyncio_loop  # type: ignore[attr-defined]
        except Exception:
            return
    previous = loop.get_exception_handler()
    if getattr(previous, _MARK, False):
        return

    def handler(lp: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if _closed_socket(context):
            return
        if previous is not None:
            previous(lp, context)
        else:
            lp.default_exception_handler(context)

    setattr(handler, _MARK, True)
    loop.set_exception_handler(handler)
