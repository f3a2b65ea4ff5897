"""Bit-for-bit comparison of byte ranges of files, without a tensor library.

Used by verification: an output tensor's bytes (where its parsed header puts them) against
the source byte ranges it was copied from. Both sides are read in 1 MiB blocks into two
reused buffers and compared with ``memcmp`` (bytes equality), so memory stays at 2 MiB
whatever the tensor size; right after a conversion both sides are still in the page cache.
Long runs of local ranges (a whole file's tensors at once) are compared where they lie in
the files' mappings instead (:class:`MappedComparer`), with no copy.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
from collections.abc import Iterator, Sequence
from typing import Any

from ..io.location import Location
from ..io.memcmp import libc_memcmp
from .plan_types import Piece

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


class MappedComparer:
    """Compares long sequences of byte ranges of local files in place: each file is mapped
    once and runs are compared with ``memcmp`` where they lie (no copy into buffers), in
    steps of :data:`STEP` bytes. Compared pages are dropped from the mappings about every
    :data:`STEP` bytes (a few ``madvise`` calls per step, not two per range: a file of many
    small tensors is many ranges), so resident memory stays near one step, not the files'
    size. A context manager."""

    STEP = 16 * 2**20

    def __init__(self) -> None:
        self._maps: dict[str, tuple[Any, Any, int]] = {}
        self._spans: dict[str, list[int]] = {}  # file -> [begin, end) compared, not dropped
        self._pending = 0  # bytes compared since pages were last dropped
        self._memcmp = libc_memcmp()

    @property
    def usable(self) -> bool:
        return self._memcmp is not None and hasattr(mmap, "MADV_DONTNEED")

    def _get(self, path: str) -> tuple[Any, int, int]:
        """(mapping, its address, file size)."""
        entry = self._maps.get(path)
        if entry is None:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if size else None
            anchor = ctypes.c_char.from_buffer(m) if m is not None else None
            entry = (m, anchor, size)
            self._maps[path] = entry
        m, anchor, size = entry
        return m, ctypes.addressof(anchor) if anchor is not None else 0, size

    def equal(self, left: Sequence[Piece], right: Sequence[Piece]) -> bool:
        """True when the bytes of ``left`` and ``right`` (local files) are the same."""
        assert self._memcmp is not None
        total = sum(p.nbytes for p in left)
        if total != sum(p.nbytes for p in right):
            return False
        a_parts, b_parts = _steps(left, self.STEP), _steps(right, self.STEP)
        a_item, b_item = next(a_parts, None), next(b_parts, None)
        while a_item is not None and b_item is not None:
            (pa, oa, na), (pb, ob, nb) = a_item, b_item
            n = min(na, nb)
            ma, addr_a, size_a = self._get(str(pa))
            mb, addr_b, size_b = self._get(str(pb))
            if oa + n > size_a or ob + n > size_b:
                return False
            if n and self._memcmp(addr_a + oa, addr_b + ob, n) != 0:
                return False
            self._compared(str(pa), ma, oa, n)
            self._compared(str(pb), mb, ob, n)
            a_item = (pa, oa + n, na - n) if na > n else next(a_parts, None)
            b_item = (pb, ob + n, nb - n) if nb > n else next(b_parts, None)
        return a_item is None and b_item is None

    def _compared(self, path: str, m: Any, offset: int, n: int) -> None:
        """Note ``[offset, offset + n)`` of ``path`` as compared. A file's compared ranges
        grow one span while they continue one another (gaps of up to :data:`BLOCK` bridged);
        a span's pages are dropped when its file's next range starts elsewhere, and every
        span's once :data:`STEP` bytes were compared since the last drop."""
        span = self._spans.get(path)
        if span is not None and span[0] - BLOCK <= offset <= span[1] + BLOCK:
            span[0], span[1] = min(span[0], offset), max(span[1], offset + n)
        else:
            if span is not None:
                _release(m, span[0], span[1] - span[0])
            self._spans[path] = [offset, offset + n]
        self._pending += n
        if self._pending >= self.STEP:
            for name, span in self._spans.items():
                _release(self._maps[name][0], span[0], span[1] - span[0])
                span[0] = span[1]
            self._pending = 0

    def close(self) -> None:
        self._spans.clear()
        self._pending = 0
        maps, self._maps = self._maps, {}
        while maps:
            m, anchor, _ = maps.popitem()[1]
            del anchor  # the exported buffer must go before the mapping closes
            if m is not None:
                m.close()

    def __enter__(self) -> MappedComparer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _steps(pieces: Sequence[Piece], step: int) -> Iterator[tuple[str | Location, int, int]]:
    """(file, offset, n) over ``pieces``, none longer than ``step``."""
    for p in pieces:
        offset, n = p.offset, p.nbytes
        while n > 0:
            k = min(n, step)
            yield p.file, offset, k
            offset, n = offset + k, n - k


def _release(m: Any, offset: int, n: int) -> None:
    """Drop the whole pages of ``[offset, offset + n)`` from mapping ``m`` (advice only)."""
    if m is None:
        return
    page = mmap.PAGESIZE
    start = -(-offset // page) * page
    stop = (offset + n) // page * page
    if stop > start:
        with contextlib.suppress(OSError, ValueError):
            m.madvise(mmap.MADV_DONTNEED, start, stop - start)
