"""A sparse local mirror of a remote checkpoint: same names, true sizes, fetched ranges only.

Layout of a mirror folder ``base``: ``base/tree/<name>`` is what the local readers open (a
file, or a folder of files); every file has its true size and holds only the ranges recorded
in ``base/state.json`` (with each object's size and ETag). The rest are holes, which the
readers never see: :mod:`.guard` refuses a mapped read of one, and the commands that read
tensor data fetch whole files first. With ``--cache DIR`` the mirror persists and a second
open reuses every range whose object still has the same size and ETag.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .backend import Backend, RemoteFile
from .guard import HoleReadError, register, unregister
from .ranges import RangeMap
from .urls import name_of, public

CHUNK = 16 * 2**20  # one range request of a large read
WORKERS = 8  # range requests in flight (memory bound: WORKERS x CHUNK)
MERGE_GAP = 64 * 2**10  # neighbouring ranges closer than this are fetched as one


class Mirror:
    """One remote URL mirrored under ``base`` (a temp dir removed by :meth:`close` unless
    ``cache`` was given)."""

    def __init__(
        self, url: str, storage_options: dict[str, Any] | None = None, cache: str | None = None
    ) -> None:
        self.url = url
        self.backend = Backend(url, storage_options)
        self.is_dir, self.remote, entry = self.backend.listing()
        if cache:
            key = hashlib.sha256(public(url).encode()).hexdigest()[:16]
            self.base = Path(cache).expanduser() / f"{name_of(url)}-{key}"
            self.base.mkdir(parents=True, exist_ok=True)
            self.temporary = False
        else:
            self.base = Path(tempfile.mkdtemp(prefix="ckpt-remote-"))
            self.temporary = True
        tree = self.base / "tree"
        self.files_root = tree / name_of(self.backend.shown) if self.is_dir else tree
        self.local = self.files_root / entry if entry else self.files_root
        self.ranges: dict[str, RangeMap] = {}
        self._claims: dict[str, RangeMap] = {}  # ranges being fetched right now
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self.on_demand = True  # a mapped read of a hole fetches it first; False: it raises
        self._stopping = False
        self._prefetcher: threading.Thread | None = None
        self.prefetch_error: Exception | None = None
        self._saved = 0.0
        self.bytes_fetched = 0
        self.requests = 0
        self._prepare()
        register(self.files_root, self)

    # -- state -----------------------------------------------------------------------------
    def _prepare(self) -> None:
        state_path = self.base / "state.json"
        old: dict[str, dict[str, object]] = {}
        if state_path.is_file():
            try:
                old = json.loads(state_path.read_text()).get("files", {})
            except (OSError, ValueError, AttributeError):
                old = {}
        if self.files_root.is_dir():  # a cached mirror: drop files the remote no longer has
            for p in sorted(self.files_root.rglob("*"), reverse=True):
                rel = p.relative_to(self.files_root).as_posix()
                if p.is_dir() and not p.is_symlink():
                    if not any(r.startswith(rel + "/") for r in self.remote):
                        shutil.rmtree(p, ignore_errors=True)
                elif rel not in self.remote:
                    p.unlink(missing_ok=True)
        for rel, f in self.remote.items():
            local = self.path(rel)
            prev = old.get(rel) or {}
            same = (
                f.etag is not None
                and prev.get("etag") == f.etag
                and prev.get("size") == f.size
                and local.is_file()
                and local.stat().st_size == f.size
            )
            if same:
                spans = prev.get("ranges")
                self.ranges[rel] = RangeMap(spans if isinstance(spans, list) else [])
                continue
            local.parent.mkdir(parents=True, exist_ok=True)
            local.unlink(missing_ok=True)
            with open(local, "wb") as out:
                out.truncate(f.size)  # sparse: no blocks until ranges are written
            self.ranges[rel] = RangeMap()
        self._save()

    def _save(self) -> None:
        files = {
            rel: {"size": f.size, "etag": f.etag, "ranges": self.ranges[rel].to_json()}
            for rel, f in self.remote.items()
        }
        tmp = self.base / "state.json.tmp"
        tmp.write_text(json.dumps({"url": public(self.url), "files": files}))
        os.replace(tmp, self.base / "state.json")
        self._saved = time.monotonic()

    def path(self, rel: str) -> Path:
        return self.files_root / rel

    def size(self, rel: str) -> int:
        return self.remote[rel].size

    def shown(self, rel: str) -> str:
        base = self.backend.shown.rstrip("/")
        return f"{base}/{rel}" if self.is_dir else base

    def close(self) -> None:
        self.stop()
        unregister(self.files_root)
        if not self.temporary:
            with self._lock:
                self._save()
        if self.temporary:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> Mirror:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the guard -------------------------------------------------------------------------
    def check(self, path: Path, start: int, end: int) -> None:
        """Called before mapped bytes are read: a hole is fetched (``on_demand``, waiting for
        the prefetch where it has the range) or raises :class:`HoleReadError`."""
        try:
            rel = path.relative_to(os.path.abspath(self.files_root)).as_posix()
        except ValueError:
            return
        ranges = self.ranges.get(rel)
        if ranges is not None and self.on_demand and not self._stopping:
            self.ensure([(rel, start, end)], merge_gap=0)
        if ranges is None or not ranges.covers(start, end):  # unknown files are refused too
            raise HoleReadError(path, self.shown(rel), start, end)

    def rel_of(self, path: Path) -> str | None:
        try:
            rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(self.files_root))
        except ValueError:
            return None
        text = rel.as_posix()
        return text if text in self.remote else None

    # -- fetching --------------------------------------------------------------------------
    def read(self, rel: str, start: int, end: int) -> bytes:
        """Bytes of the mirror file (fetching them first when missing)."""
        end = min(end, self.size(rel))
        self.ensure([(rel, start, end)])
        fd = os.open(self.path(rel), os.O_RDONLY)
        try:
            return os.pread(fd, end - start, start)
        finally:
            os.close(fd)

    def ensure(self, wanted: Iterable[tuple[str, int, int]], merge_gap: int = MERGE_GAP) -> None:
        """Fetch whatever of ``(rel, start, end)`` ranges is missing: neighbouring ranges
        merged, large ones split in :data:`CHUNK` pieces, :data:`WORKERS` requests at once.
        Ranges another thread is fetching (the background prefetch) are waited for."""
        by_file: dict[str, list[list[int]]] = {}
        for rel, start, end in sorted(wanted):
            end = min(end, self.size(rel))
            if end <= start:
                continue
            merged = by_file.setdefault(rel, [])
            if merged and start - merged[-1][1] <= merge_gap:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([max(0, start), end])
        while True:
            jobs: list[tuple[str, int, int]] = []
            waiting = False
            with self._cond:
                for rel, spans in by_file.items():
                    claims = self._claims.setdefault(rel, RangeMap())
                    for s, e in spans:
                        for gs, ge in self.ranges[rel].missing(s, e):
                            free = claims.missing(gs, ge)
                            waiting = waiting or free != [(gs, ge)]
                            for fs, fe in free:
                                claims.add(fs, fe)
                                jobs += [(rel, p, min(fe, p + CHUNK)) for p in range(fs, fe, CHUNK)]
                if not jobs and not waiting:
                    return
                if not jobs:
                    self._cond.wait(0.5)
                    continue
            self._run(jobs)

    def _run(self, jobs: list[tuple[str, int, int]]) -> None:
        """Fetch claimed ``jobs``; claims are released whatever happens."""
        try:
            if len(jobs) == 1:
                self._fetch(*jobs[0])
            else:
                pool = ThreadPoolExecutor(min(WORKERS, len(jobs)), "ckpt-remote")
                try:
                    for fut in [pool.submit(self._fetch, *job) for job in jobs]:
                        fut.result()
                finally:
                    pool.shutdown(wait=True, cancel_futures=True)
        finally:
            with self._cond:
                for rel, s, e in jobs:
                    self._claims[rel].remove(s, e)
                if not self.temporary and time.monotonic() - self._saved > 1.0:
                    self._save()
                self._cond.notify_all()

    def ensure_whole(self, rels: Iterable[str] | None = None) -> None:
        names = self.remote if rels is None else list(rels)
        self.ensure([(rel, 0, self.size(rel)) for rel in names], merge_gap=0)

    def prefetch(self, order: list[str]) -> None:
        """Fetch ``order``'s files whole in a background thread while the caller reads; a read
        of a range not there yet waits for it (or fetches it) through :meth:`check`."""

        def run() -> None:
            try:
                self.ensure_whole(order)
            except Exception as e:  # the reader meets the same failure itself, with its URL
                self.prefetch_error = e

        self._prefetcher = threading.Thread(target=run, name="ckpt-prefetch", daemon=True)
        self._prefetcher.start()

    def stop(self) -> None:
        """Stop the background prefetch (pending requests are dropped)."""
        self._stopping = True
        if self._prefetcher is not None:
            self._prefetcher.join()

    def _fetch(self, rel: str, start: int, end: int) -> None:
        if self._stopping:
            raise _Stopped()
        f: RemoteFile = self.remote[rel]
        data = self.backend.read(f, start, end)
        fd = os.open(self.path(rel), os.O_WRONLY)
        try:
            view = memoryview(data)
            pos = 0
            while pos < len(view):
                pos += os.pwrite(fd, view[pos:], start + pos)
        finally:
            os.close(fd)
        with self._lock:
            self.ranges[rel].add(start, end)  # recorded only once fully written
            self.bytes_fetched += len(data)
            self.requests += 1

    @property
    def complete(self) -> bool:
        return all(self.ranges[r].covers(0, f.size) for r, f in self.remote.items())


class _Stopped(Exception):
    """The mirror is closing: a pending request is dropped."""


__all__ = ["HoleReadError", "Mirror"]
