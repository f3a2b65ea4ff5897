"""Getting the output to disk while verification reads it back.

``cp`` + ``sync`` copies everything, then waits for it to reach the disk. A conversion runs
that wait (``fsync`` of every output file) in a thread while verification reads the output
and the source from the page cache; durability is the same: the output is installed only
after the fsync returned.

While a file is written, :class:`WriteBehind` starts its disk writes behind the copy: a
thread calls ``fdatasync`` on the file each time another :data:`WriteBehind.STEP` bytes were
written, so the disk works while the copy goes on and the final fsync finds little left
(``cp`` + ``sync`` starts the disk only after the copy). On an idle CPU this takes the wait
after the copy from about 0.4 s per GiB to nearly nothing; on a CPU-bound machine the
thread's writeback work competes with the copy and the wall time stays about the same.
``sync_file_range(SYNC_FILE_RANGE_WRITE)`` in the copying thread made the copy wait on the
device as long as it saved, and ``fdatasync`` every 128-512 MiB started the disk too late.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from .atomic import fsync_tree


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


class WriteBehind:
    """Flushes an open file to disk in a thread while it is written: call :meth:`wrote`
    with each count of bytes written, :meth:`close` before the descriptor is closed. The
    flushes only start the disk writes early; the caller still fsyncs the finished file,
    and a flush error is left for that fsync to report."""

    STEP = 64 * 2**20

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pending = 0
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="ckpt-write-behind")
        self._thread.start()

    def wrote(self, n: int) -> None:
        self._pending += n
        if self._pending >= self.STEP:
            self._pending = 0
            self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stop:
                return
            try:
                os.fdatasync(self._fd)
            except OSError:
                return  # the caller's own fsync reports it

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join()

    def __enter__(self) -> WriteBehind:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
