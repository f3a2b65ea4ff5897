"""Read file ranges ahead of a consumer, so that reading overlaps with computing."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from .location import Location


class Readahead:
    """Ask for file ranges ahead of the consumer: the kernel for a local file
    (``posix_fadvise WILLNEED``: page cache, not process memory), the store for any other
    (a background fetch that the consumer's read takes over).

    ``ranges`` are ``(file, offset, nbytes)`` in the order they will be consumed; a background
    thread keeps at most ``window`` bytes requested ahead of :meth:`advance`'s position and
    skips what was consumed already.
    """

    PIECE = 8 * 2**20
    REMOTE_PIECE = 16 * 2**20  # a request has a fixed cost: fewer, larger ones for a store

    def __init__(
        self, ranges: Sequence[tuple[Location | Path, int, int]], window: int = 256 * 2**20
    ):
        self._ranges = list(ranges)
        self._window = window
        self._consumed = 0
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        if self._ranges:
            self._thread = threading.Thread(target=self._run, name="ckpt-readahead")
            self._thread.daemon = True
            self._thread.start()

    def advance(self, consumed: int) -> None:
        with self._cond:
            self._consumed = consumed
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Readahead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        fds: dict[Path, int] = {}
        issued = 0
        try:
            for where, offset, nbytes in self._ranges:
                local = where if isinstance(where, Path) else where.local_path()
                piece = self.PIECE if local is not None else self.REMOTE_PIECE
                pos = 0
                while pos < nbytes:
                    n = min(piece, nbytes - pos)
                    with self._cond:
                        while not self._stop and issued - self._consumed > self._window:
                            self._cond.wait(0.05)
                        if self._stop:
                            return
                        behind = issued + n <= self._consumed  # read already: nothing to ask
                    if behind:
                        pass
                    elif local is not None:
                        _advise(fds, local, offset + pos, n)
                    elif isinstance(where, Location):
                        with contextlib.suppress(Exception):  # the read itself reports
                            where.will_need(offset + pos, offset + pos + n)
                    pos += n
                    issued += n
        finally:
            for fd in fds.values():
                if fd >= 0:
                    os.close(fd)


def _advise(fds: dict[Path, int], path: Path, offset: int, n: int) -> None:
    """``posix_fadvise(WILLNEED)`` on ``path`` (its descriptor kept in ``fds``)."""
    if not hasattr(os, "posix_fadvise"):
        return
    fd = fds.get(path)
    if fd is None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            fd = -1
        fds[path] = fd
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, offset, n, os.POSIX_FADV_WILLNEED)
