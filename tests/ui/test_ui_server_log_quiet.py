"""A closed tab's failed websocket write is not reported on the server's event loop; every
other unretrieved error still is (the browser side is test_ui_server_log.py)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from tornado.websocket import WebSocketClosedError

from ckpt_explorer.ui.server_log import quiet_closed_sockets


def test_only_closed_socket_errors_are_dropped() -> None:
    loop = asyncio.new_event_loop()
    seen: list[Any] = []
    loop.set_exception_handler(lambda _lp, ctx: seen.append(ctx.get("exception")))
    try:

        async def install() -> None:
            quiet_closed_sockets()
            quiet_closed_sockets()  # once per loop

        # in a thread of its own: a test before this one may leave a loop running in this one
        runner = threading.Thread(target=loop.run_until_complete, args=(install(),))
        runner.start()
        runner.join()
        closed, other = WebSocketClosedError(), ValueError("a real error")
        loop.call_exception_handler({"message": "Task exception was never retrieved",
                                     "exception": closed})  # fmt: skip
        loop.call_exception_handler({"message": "Task exception was never retrieved",
                                     "exception": other})  # fmt: skip
        assert seen == [other]
    finally:
        loop.close()
