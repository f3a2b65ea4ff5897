"""A free TCP port on the loopback interface (torchrun rendezvous, the dashboard server)."""

from __future__ import annotations

import socket


def free_port(address: str = "127.0.0.1") -> int:
    """A port that nothing listens on at ``address`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])
