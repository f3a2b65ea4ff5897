"""Bit-for-bit comparison of byte ranges of files, without a tensor library.

Used by verification: an output tensor's bytes (where its parsed header puts them) against
the source byte ranges it was copied from. Both sides are read in 1 MiB blocks into two
reused buffers and compared with ``memcmp`` (bytes equality), so memory stays at 2 MiB
whatever the tensor size; right after a conversion both sides are still in the page cache.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

from ..io.location import Location
from .plan import Piece

BLOCK = 2**20


class OpenFiles:
    """Read-only descriptors opened on first use and closed together (a context manager)."""

    def __init__(self) -> None:
        self._fds: dict[str, tuple[int, int]] = {}

    def get(self, path: str) -> tuple[int, int]:
        """(descriptor, size) of ``path``."""
        entry = self._fds.get(path)
        if entry is None:
            fd = os.open(path, os.O_RDONLY)
            entry = (fd, os.fstat(fd).st_size)
            if hasattr(os, "posix_fadvise"):  # read ahead further: ranges are read in order
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            self._fds[path] = entry
        return entry

    def close(self) -> None:
        for fd, _ in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> OpenFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RangeComparer:
    """Compares two sequences of byte ranges; reuse one instance for many tensors."""

    def __init__(self, files: OpenFiles) -> None:
        self.files = files
        self._a = bytearray(BLOCK)
        self._b = bytearray(BLOCK)

    def _fill(
        self, buf: bytearray, parts: Iterator[tuple[str | Location, int, int]], want: int
    ) -> int:
        """Fill ``buf[:want]`` from ``parts`` (blocks may straddle piece ends); bytes read."""
        view = memoryview(buf)
        got = 0
        while got < want:
            item = next(parts, None)
            if item is None:
                return got
            path, offset, n = item
            if isinstance(path, Location):  # a remote source: read through its store
                data = path.read_range(offset, offset + n, keep=False)
                view[got : got + len(data)] = data
                got += len(data)
                if len(data) < n:
                    return got
                continue
            fd, size = self.files.get(path)
            if offset + n > size:
                return got
            k = os.preadv(fd, [view[got : got + n]], offset)
            got += k
            if k < n:
                return got
        return got

    def equal(self, left: Sequence[Piece], right: Sequence[Piece]) -> bool:
        """True when the bytes of ``left`` and ``right`` are the same, bit for bit."""
        total = sum(p.nbytes for p in left)
        if total != sum(p.nbytes for p in right):
            return False
        a_parts, b_parts = _resplit(left), _resplit(right)
        done = 0
        while done < total:
            n = min(BLOCK, total - done)
            if self._fill(self._a, a_parts, n) != n or self._fill(self._b, b_parts, n) != n:
                return False
            if n == BLOCK:
                if self._a != self._b:
                    return False
            elif self._a[:n] != self._b[:n]:
                return False
            done += n
        return True


def _resplit(pieces: Sequence[Piece]) -> Iterator[tuple[str | Location, int, int]]:
    """(file, offset, n) over ``pieces``, cut at every multiple of ``BLOCK`` of the running
    position, so both sides of a comparison fill their buffers in the same steps."""
    pos = 0
    for p in pieces:
        offset, n = p.offset, p.nbytes
        while n > 0:
            k = min(n, BLOCK - pos % BLOCK)
            yield p.file, offset, k
            offset, n, pos = offset + k, n - k, pos + k
