"""Byte spans of remote objects held in memory: what parsers read (headers, pickles, zip
directories) is fetched once per store, however often the readers come back to it."""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

Piece = tuple[int, bytes]  # (start, bytes)
Gap = tuple[int, int]  # [start, end)


def split(start: int, end: int, held: Iterable[Piece]) -> tuple[list[Piece], list[Gap]]:
    """The parts of ``[start, end)`` that ``held`` (sorted, disjoint) covers, and the gaps."""
    have: list[Piece] = []
    gaps: list[Gap] = []
    pos = start
    for a, data in held:
        b = a + len(data)
        if b <= pos:
            continue
        if a >= end:
            break
        if a > pos:
            gaps.append((pos, a))
            pos = a
        take_end = min(b, end)
        have.append((pos, data[pos - a : take_end - a]))
        pos = take_end
        if pos >= end:
            break
    if pos < end:
        gaps.append((pos, end))
    return have, gaps


def join(start: int, end: int, pieces: Iterable[Piece]) -> bytes:
    """``[start, end)`` from pieces that cover it (any order; overlaps allowed)."""
    out = bytearray(end - start)
    for a, data in pieces:
        lo, hi = max(a, start), min(a + len(data), end)
        if hi > lo:
            out[lo - start : hi - start] = data[lo - a : hi - a]
    return bytes(out)


class PieceIndex:
    """Pieces (any order, overlaps allowed) searchable by range: a read of many small ranges
    (10,000 zip headers) looks at the few pieces near each, not at all of them."""

    def __init__(self, pieces: Iterable[Piece]) -> None:
        self.pieces = sorted(pieces, key=lambda p: p[0])
        self.starts = [a for a, _ in self.pieces]
        self.reach: list[int] = []  # the furthest end of any piece up to here
        furthest = -1
        for a, data in self.pieces:
            furthest = max(furthest, a + len(data))
            self.reach.append(furthest)

    def get(self, start: int, end: int) -> bytes:
        """``[start, end)`` from the pieces that cover it."""
        i = bisect.bisect_left(self.starts, end) - 1
        near: list[Piece] = []
        while i >= 0 and self.reach[i] > start:
            near.append(self.pieces[i])
            i -= 1
        return join(start, end, near)


def merge(gaps: Sequence[Gap], tolerance: int) -> list[Gap]:
    """Sorted gaps with neighbours closer than ``tolerance`` bytes merged into one."""
    out: list[list[int]] = []
    for a, b in sorted(gaps):
        if out and a - out[-1][1] <= tolerance:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


class Spans:
    """Disjoint spans of one object, sorted by start."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.data: list[bytes] = []
        self.nbytes = 0

    def near(self, start: int, end: int) -> list[Piece]:
        """The spans that may overlap ``[start, end)``, in order."""
        i = max(0, bisect.bisect_right(self.starts, start) - 1)
        j = bisect.bisect_left(self.starts, end)
        return list(zip(self.starts[i:j], self.data[i:j], strict=True))

    def add(self, start: int, data: bytes) -> int:
        """Keep the parts of ``data`` not held yet; returns the bytes added."""
        _, gaps = split(start, start + len(data), self.near(start, start + len(data)))
        added = 0
        for a, b in gaps:
            i = bisect.bisect_left(self.starts, a)
            self.starts.insert(i, a)
            self.data.insert(i, data[a - start : b - start])
            added += b - a
        self.nbytes += added
        return added


class MemoryCache:
    """Spans per object, up to ``limit`` bytes in all (least recently used objects go first);
    a span larger than a quarter of the limit is not kept."""

    def __init__(self, limit: int = 256 * 2**20) -> None:
        self.limit = limit
        self._objects: OrderedDict[str, Spans] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def split(self, rel: str, start: int, end: int) -> tuple[list[Piece], list[Gap]]:
        with self._lock:
            spans = self._objects.get(rel)
            if spans is None:
                return [], [(start, end)]
            self._objects.move_to_end(rel)
            return split(start, end, spans.near(start, end))

    def add(self, rel: str, start: int, data: bytes) -> None:
        if not data or len(data) > self.limit // 4:
            return
        with self._lock:
            spans = self._objects.setdefault(rel, Spans())
            self._objects.move_to_end(rel)
            self._total += spans.add(start, data)
            while self._total > self.limit and len(self._objects) > 1:
                _, dropped = self._objects.popitem(last=False)
                self._total -= dropped.nbytes
