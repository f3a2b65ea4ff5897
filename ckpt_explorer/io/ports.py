"""A free TCP port on the loopback interface (torchrun rendezvous, the dashboard server)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable


def free_port(address: str = "127.0.0.1") -> int:
    """A port that nothing listens on at ``address`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def port_is_free(address: str, port: int) -> bool:
    """True when a server could bind ``address:port`` now (as tornado does, SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError:
            return False
        return True


def wait_until_listening(
    address: str, port: int, alive: Callable[[], bool], timeout_s: float = 120.0
) -> bool:
    """Wait until ``address:port`` accepts a connection; False when ``alive()`` turns False
    (the server gave up) or ``timeout_s`` passes first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=1.0):
                return True
        except OSError:
            if not alive():
                return False
            time.sleep(0.1)
    return False
