"""Getting the output to disk while it is written and while verification reads it back.

``cp`` + ``sync`` copies everything, then waits for it all to reach the disk. A conversion
starts the disk writes of each output file behind the copy (:class:`Writeback`: Linux's
``sync_file_range(SYNC_FILE_RANGE_WRITE)`` on what was written, every :data:`EVERY` bytes,
which queues the writes and returns without waiting for them), so the disk works while the
copy goes on; then it runs the wait (``fsync`` of every output file) in a thread while
verification reads the output and the source from the page cache. Durability is the same:
the output is installed only after the fsync returned. (A background ``fdatasync`` every
128-512 MiB, which waits for its writes, measured no better and is not used.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .atomic import fsync_tree

EVERY = 32 * 2**20
SYNC_FILE_RANGE_WRITE = 2
_sync_file_range: Any = None


def start_writeback(fd: int, offset: int, nbytes: int) -> bool:
    """Queue the disk writes of ``[offset, offset + nbytes)`` of ``fd`` without waiting for
    them; False where the system has no ``sync_file_range`` (nothing is done then)."""
    fn = _writeback_fn()
    if fn is None or nbytes <= 0:
        return False
    return bool(fn(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE) == 0)


def _writeback_fn() -> Any:
    global _sync_file_range
    if _sync_file_range is None:
        _sync_file_range = False
        try:
            import ctypes

            fn = ctypes.CDLL(None, use_errno=True).sync_file_range
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
            _sync_file_range = fn
        except (OSError, AttributeError):
            pass
    return _sync_file_range or None


class Writeback:
    """A progress callback (``tick(nbytes)``) for a file written front to back: it counts
    the bytes written from ``start`` and starts the disk writes of each :data:`EVERY` bytes
    (``tick``, if given, is called on)."""

    def __init__(self, fd: int, start: int, tick: Callable[[int], None] | None = None) -> None:
        self.fd, self.tick = fd, tick
        self.queued = 0  # written below it: disk writes started
        self.pos = start
        self.enabled = _writeback_fn() is not None

    def __call__(self, nbytes: int) -> None:
        self.pos += nbytes
        if self.enabled and self.pos - self.queued >= EVERY:
            self.enabled = start_writeback(self.fd, self.queued, self.pos - self.queued)
            self.queued = self.pos
        if self.tick is not None:
            self.tick(nbytes)


class BackgroundSync:
    """``fsync_tree(root)`` in a thread; :meth:`join` waits and re-raises its error."""

    def __init__(self, root: Path) -> None:
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(root,), daemon=True)
        self._thread.start()

    def _run(self, root: Path) -> None:
        try:
            fsync_tree(root)
        except BaseException as e:  # re-raised in the caller's thread
            self.error = e

    def join(self) -> None:
        self._thread.join()
        if self.error is not None:
            raise self.error
