"""``--cache DIR``: fetched bytes of remote objects kept on disk, keyed by URL + ETag + size.

Per object version, two files: ``<url>-<version>.dat`` holds fetched bytes appended in the
order they came, ``<url>-<version>.idx`` one line ``start end offset`` per span (written after
its bytes, so a line always points at complete bytes). Appends, and the removal of an
object's older versions, happen under an exclusive ``fcntl.flock`` on ``<url>.lock``;
index reads take it shared: several processes can share one cache folder. Nothing is written
at the objects' true sizes (no sparse files); an object without an ETag is never cached.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import hashlib
import itertools
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from .spans import Gap, Piece, split


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class DiskCache:
    """A cache folder (created on first use)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser()

    def entry(self, url: str, etag: str | None, size: int) -> CacheEntry | None:
        """The cached bytes of ``url`` at this ETag and size (None without an ETag). Older
        versions of the object are removed."""
        if not etag:
            return None
        self.root.mkdir(parents=True, exist_ok=True)
        return CacheEntry(self.root, _digest(url), _digest(f"{etag}\0{size}"))


class CacheEntry:
    """The cached spans of one object version."""

    def __init__(self, root: Path, url_key: str, version: str) -> None:
        self._lock_path = root / f"{url_key}.lock"
        self.data_path = root / f"{url_key}-{version}.dat"
        self.index_path = root / f"{url_key}-{version}.idx"
        self._spans: list[tuple[int, int, int]] = []  # (start, end, offset in .dat), sorted
        self._starts: list[int] = []
        self._reach: list[int] = []  # the furthest end of any span up to here
        self._index_read = 0  # bytes of .idx parsed so far
        self._mutex = threading.Lock()
        with self._locked(fcntl.LOCK_EX):
            for old in root.glob(f"{url_key}-*"):
                if old not in (self.data_path, self.index_path):
                    old.unlink(missing_ok=True)  # another version: the object changed
            for p in (self.data_path, self.index_path):
                if not p.exists():
                    p.touch()

    @contextlib.contextmanager
    def _locked(self, how: int) -> Iterator[None]:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, how)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _refresh(self) -> None:
        """Parse index lines appended since the last look (by any process)."""
        with contextlib.suppress(FileNotFoundError), open(self.index_path, "rb") as f:
            f.seek(self._index_read)
            text = f.read()
        if not text:
            return
        complete = text[: text.rfind(b"\n") + 1]  # a line is used once whole
        self._index_read += len(complete)
        for line in complete.splitlines():
            try:
                start, end, offset = (int(x) for x in line.split())
            except ValueError:
                continue
            self._spans.append((start, end, offset))
        self._spans.sort()
        self._starts = [s for s, _, _ in self._spans]
        self._reach = list(itertools.accumulate((e for _, e, _ in self._spans), max))

    def split(self, gaps: list[Gap]) -> tuple[list[Piece], list[Gap]]:
        """The cached parts of ``gaps`` (read from disk) and what is still missing."""
        with self._mutex:
            with self._locked(fcntl.LOCK_SH):
                self._refresh()
            near = [self._near(a, b) for a, b in gaps]
        pieces: list[Piece] = []
        missing: list[Gap] = []
        for (a, b), spans in zip(gaps, near, strict=True):
            have, rest = self._split_one(a, b, spans)
            pieces += have
            missing += rest
        return pieces, missing

    def _near(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """The spans that may overlap ``[start, end)``."""
        i = bisect.bisect_left(self._starts, end) - 1
        out: list[tuple[int, int, int]] = []
        while i >= 0 and self._reach[i] > start:
            out.append(self._spans[i])
            i -= 1
        return out

    def _split_one(
        self, start: int, end: int, spans: list[tuple[int, int, int]]
    ) -> tuple[list[Piece], list[Gap]]:
        wanted: list[tuple[int, int, int]] = []  # (start, length, offset in .dat), disjoint
        gaps: list[Gap] = [(start, end)]
        for s, e, offset in spans:  # spans may overlap: each fills what is still missing
            if e <= start or s >= end:
                continue
            still: list[Gap] = []
            for a, b in gaps:
                lo, hi = max(a, s), min(b, e)
                if hi <= lo:
                    still.append((a, b))
                    continue
                wanted.append((lo, hi - lo, offset + lo - s))
                still += [g for g in ((a, lo), (hi, b)) if g[0] < g[1]]
            gaps = still
            if not gaps:
                break
        if not wanted:
            return [], gaps
        return split(start, end, sorted(self._read(wanted)))

    def _read(self, wanted: list[tuple[int, int, int]]) -> list[Piece]:
        out: list[Piece] = []
        fd = os.open(self.data_path, os.O_RDONLY)
        try:
            for at, n, offset in wanted:
                data = os.pread(fd, n, offset)
                if len(data) == n:
                    out.append((at, data))
        finally:
            os.close(fd)
        return out

    def add(self, start: int, data: bytes) -> None:
        """Append ``data`` (the object's bytes at ``start``) and its index line."""
        if not data:
            return
        with self._mutex, self._locked(fcntl.LOCK_EX):
            fd = os.open(self.data_path, os.O_WRONLY | os.O_APPEND)
            try:
                offset = os.fstat(fd).st_size
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            with open(self.index_path, "ab") as idx:
                idx.write(f"{start} {start + len(data)} {offset}\n".encode())
