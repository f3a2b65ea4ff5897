"""Which byte ranges of a file are present: a sorted list of disjoint half-open intervals."""

from __future__ import annotations


class RangeMap:
    """Disjoint, sorted ``[start, end)`` intervals; adding merges touching ones."""

    def __init__(self, spans: list[list[int]] | None = None) -> None:
        self.spans: list[tuple[int, int]] = []
        for s, e in spans or []:
            self.add(int(s), int(e))

    def add(self, start: int, end: int) -> None:
        if end <= start:
            return
        out: list[tuple[int, int]] = []
        for s, e in self.spans:
            if e < start or s > end:
                out.append((s, e))
            else:
                start, end = min(s, start), max(e, end)
        out.append((start, end))
        out.sort()
        self.spans = out

    def remove(self, start: int, end: int) -> None:
        out: list[tuple[int, int]] = []
        for s, e in self.spans:
            if e <= start or s >= end:
                out.append((s, e))
                continue
            if s < start:
                out.append((s, start))
            if e > end:
                out.append((end, e))
        self.spans = out

    def missing(self, start: int, end: int) -> list[tuple[int, int]]:
        """The parts of ``[start, end)`` not present, in order."""
        gaps: list[tuple[int, int]] = []
        pos = start
        for s, e in self.spans:
            if e <= pos:
                continue
            if s >= end:
                break
            if s > pos:
                gaps.append((pos, s))
            pos = max(pos, e)
            if pos >= end:
                break
        if pos < end:
            gaps.append((pos, end))
        return gaps

    def covers(self, start: int, end: int) -> bool:
        return end <= start or not self.missing(start, end)

    @property
    def present(self) -> int:
        return sum(e - s for s, e in self.spans)

    def to_json(self) -> list[list[int]]:
        return [[s, e] for s, e in self.spans]
