"""A file's bytes as a read-only buffer read block by block through its location.

What code written against ``bytes`` or an ``mmap`` (``len``, indexing, slicing, ``find``)
walks where no OS file can be mapped: only the blocks it touches are read. Recently used
blocks are kept (at most ``BLOCK * KEEP`` bytes); a slice larger than a block is read as one
range.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import overload

from .location import Location

BLOCK = 64 * 2**10
KEEP = 256


class RangeBuffer:
    """``location``'s ``size`` bytes, read on demand."""

    def __init__(self, location: Location, size: int | None = None) -> None:
        self.location = location
        self._size = location.size() if size is None else size
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._size

    def _block(self, index: int) -> bytes:
        with self._lock:
            found = self._blocks.get(index)
            if found is not None:
                self._blocks.move_to_end(index)
                return found
        start = index * BLOCK
        data = self.location.read_range(start, min(self._size, start + BLOCK), keep=False)
        with self._lock:
            self._blocks[index] = data
            while len(self._blocks) > KEEP:
                self._blocks.popitem(last=False)
        return data

    def _range(self, start: int, end: int) -> bytes:
        start, end = max(0, start), min(self._size, end)
        if end <= start:
            return b""
        first, last = start // BLOCK, (end - 1) // BLOCK
        if last - first > 1:  # a large slice: one read
            return self.location.read_range(start, end, keep=False)
        parts = [self._block(i) for i in range(first, last + 1)]
        joined = parts[0] if len(parts) == 1 else b"".join(parts)
        base = first * BLOCK
        return joined[start - base : end - base]

    @overload
    def __getitem__(self, key: int) -> int: ...

    @overload
    def __getitem__(self, key: slice) -> bytes: ...

    def __getitem__(self, key: int | slice) -> int | bytes:
        if isinstance(key, slice):
            start, stop, step = key.indices(self._size)
            if step != 1:
                return self._range(0, self._size)[key]
            return self._range(start, stop)
        if key < 0:
            key += self._size
        if not 0 <= key < self._size:
            raise IndexError("RangeBuffer index out of range")
        return self._block(key // BLOCK)[key % BLOCK]

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        """The first index of ``sub`` in ``[start, end)``, or -1 (read a block at a time)."""
        end = self._size if end is None else min(end, self._size)
        pos = max(0, start)
        overlap = max(0, len(sub) - 1)
        while pos < end:
            stop = min(end, (pos // BLOCK + 1) * BLOCK + overlap)
            chunk = self._range(pos, stop)
            at = chunk.find(sub)
            if at >= 0:
                return pos + at
            if stop >= end:
                return -1
            pos = stop - overlap
        return -1
