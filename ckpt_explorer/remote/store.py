"""The fsspec store: a remote checkpoint read in byte ranges, never copied whole.

:func:`open_url` lists the URL once (a folder recursively; an index URL with the shards it
names; a single object alone) and pins every object's size and ETag: reads ask the server for
that version (``If-Match``), so a changed object gives a clear error, never mixed bytes.
Reads come, in this order, from the bytes kept in memory (structure that parsers read), a
background read-ahead, the ``--cache`` folder, then the network (ranges fetched concurrently,
retried). A read near the start or the end of an object fetches the object's first or last
64 KiB whole: magic bytes, headers, zip directories live there.
"""

from __future__ import annotations

import json
import posixpath
import stat as stat_module
import threading
import zlib
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path, PurePath, PurePosixPath
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from ..errors import CkptExplorerError
from ..io.gguf_header import split_names
from ..io.location import Location
from ..io.store import DIR, FILE, StatResult, StoreStat
from ..io.store_file import open_store_file
from .backend import Backend, RemoteError, RemoteFile
from .disk_cache import CacheEntry, DiskCache
from .spans import Gap, MemoryCache, Piece, PieceIndex, join, merge, split

HEAD = 64 * 2**10  # a structure read in the first HEAD bytes fetches them all
TAIL = 64 * 2**10 + 98  # likewise the last bytes (a zip's comment, EOCD and zip64 records)
MERGE_GAP = 64 * 2**10  # structure ranges closer than this are fetched as one
AHEAD_WORKERS = 8
AHEAD_LIMIT = 512 * 2**20  # read-ahead bytes held before the oldest are dropped


class FsspecStore:
    """The objects under one URL, as listed when it was opened."""

    def __init__(
        self, backend: Backend, files: dict[str, RemoteFile], cache: DiskCache | None = None
    ) -> None:
        self.backend = backend
        self.files = dict(files)
        self.dirs = {""}
        for rel in self.files:
            folders = rel.split("/")[:-1]
            self.dirs.update("/".join(folders[: i + 1]) for i in range(len(folders)))
        self.cache = cache
        url = urlsplit(backend.shown)
        self._origin = f"{url.scheme}://{url.netloc}"
        self.base = PurePosixPath(url.path or "/")
        self.memory = MemoryCache()
        self._entries: dict[str, CacheEntry | None] = {}
        self._ahead: dict[str, list[tuple[int, int, Future[bytes]]]] = {}
        self._ahead_bytes = 0
        self._lock = threading.Lock()

    # -- what a torchrun rank needs to reopen it (registry.RemoteStore) ----------------------
    @property
    def url(self) -> str:
        return self.backend.url

    @property
    def options(self) -> dict[str, Any]:
        return self.backend.options

    @property
    def cache_root(self) -> str | None:
        return str(self.cache.root) if self.cache is not None else None

    # -- names ------------------------------------------------------------------------------
    # A location's path is the URL's path (``/run/ckpt/model.safetensors``), so that names and
    # parents read as they do locally; what lies outside the listed root is not there.
    def _rel(self, path: PurePath) -> str | None:
        try:
            rel = path.relative_to(self.base).as_posix()
        except ValueError:
            return None
        return "" if rel == "." else rel

    def shown(self, path: PurePath) -> str:
        return f"{self._origin}{path.as_posix()}"

    def entry_type(self, path: PurePath) -> str | None:
        rel = self._rel(path)
        if rel is None:
            return None
        if rel in self.files:
            return FILE
        return DIR if rel in self.dirs else None

    def is_link(self, path: PurePath) -> bool:
        return False

    def children(self, path: PurePath) -> list[str]:
        rel = self._rel(path)
        if rel is None or rel in self.files:
            return []
        prefix = f"{rel}/" if rel else ""
        names = {r[len(prefix) :].split("/", 1)[0] for r in self.files if r.startswith(prefix)}
        return sorted(names)

    def stat(self, path: PurePath) -> StatResult:
        rel = self._rel(path)
        f = self.files.get(rel) if rel is not None else None
        if f is None:
            if rel is not None and rel in self.dirs:
                return StoreStat(0, 0.0, 0, stat_module.S_IFDIR | 0o555)
            raise FileNotFoundError(2, "not listed", self.shown(path))
        version = zlib.crc32(f"{f.etag}".encode())
        return StoreStat(f.size, 0.0, version, stat_module.S_IFREG | 0o444)

    def local_path(self, path: PurePath) -> Path | None:
        return None

    def resolve(self, path: PurePath) -> PurePath:
        return PurePosixPath(posixpath.normpath(path.as_posix()))

    def open(self, path: PurePath) -> BinaryIO:
        return open_store_file(self, path, self._file(path)[1].size)

    def location(self, rel: str) -> Location:
        """The location of ``rel`` (relative to the root)."""
        return Location(self, self.base / rel if rel else self.base)

    def _file(self, path: PurePath) -> tuple[str, RemoteFile]:
        rel = self._rel(path)
        f = self.files.get(rel) if rel is not None else None
        if rel is None or f is None:
            raise CkptExplorerError(
                self.shown(path), "an object of the listed checkpoint", "none at that path"
            )
        return rel, f

    # -- reading ----------------------------------------------------------------------------
    def read(self, path: PurePath, start: int, end: int, keep: bool = True) -> bytes:
        return self.read_ranges(path, [(start, end)], keep)[0]

    def read_ranges(
        self, path: PurePath, ranges: Sequence[tuple[int, int]], keep: bool = True
    ) -> list[bytes]:
        rel, f = self._file(path)
        wanted = [(max(0, s), min(e, f.size)) for s, e in ranges]
        pieces: list[Piece] = []
        gaps: list[Gap] = []
        for s, e in wanted:
            if e <= s:
                continue
            have, missing = self.memory.split(rel, s, e) if keep else ([], [(s, e)])
            pieces += have
            gaps += missing
        if gaps:
            pieces += self._fill(rel, f, gaps, keep)
        found = PieceIndex(pieces)
        return [found.get(s, e) if e > s else b"" for s, e in wanted]

    def _fill(self, rel: str, f: RemoteFile, gaps: list[Gap], keep: bool) -> list[Piece]:
        """Bytes for ``gaps``: from the read-ahead, the disk cache, then the network."""
        pieces, gaps = self._from_ahead(rel, gaps)
        entry = self._entry(rel, f)
        if entry is not None and gaps:
            have, gaps = entry.split(gaps)
            pieces += have
        if gaps:
            fetch = merge([self._widen(g, f.size) for g in gaps], MERGE_GAP) if keep else gaps
            got = self.backend.fetch(f, fetch, str(self.location(rel)))
            fetched = list(zip([a for a, _ in fetch], got, strict=True))
            if entry is not None:
                for a, data in fetched:
                    entry.add(a, data)
            pieces += fetched
        if keep:
            for a, data in pieces:
                self.memory.add(rel, a, data)
        return pieces

    @staticmethod
    def _widen(gap: Gap, size: int) -> Gap:
        a, b = gap
        if a < HEAD:
            b = max(b, min(HEAD, size))
        if b > size - TAIL:
            a = min(a, max(0, size - TAIL))
            b = size
        return a, b

    def _entry(self, rel: str, f: RemoteFile) -> CacheEntry | None:
        if self.cache is None:
            return None
        with self._lock:
            if rel not in self._entries:
                url = str(self.location(rel))
                self._entries[rel] = self.cache.entry(url, f.etag, f.size)
            return self._entries[rel]

    # -- read-ahead -------------------------------------------------------------------------
    def will_need(self, path: PurePath, start: int, end: int) -> None:
        rel, f = self._file(path)
        end = min(end, f.size)
        if end <= start:
            return
        with self._lock:
            fut = _ahead_pool().submit(self._fetch_ahead, rel, f, start, end)
            self._ahead.setdefault(rel, []).append((start, end, fut))
            self._ahead_bytes += end - start
            self._trim_ahead()

    def _fetch_ahead(self, rel: str, f: RemoteFile, start: int, end: int) -> bytes:
        entry = self._entry(rel, f)
        if entry is not None:
            have, gaps = entry.split([(start, end)])
            if not gaps:
                return join(start, end, have)
        data = self.backend.fetch(f, [(start, end)], str(self.location(rel)))[0]
        if entry is not None:
            entry.add(start, data)
        return data

    def _trim_ahead(self) -> None:
        """Drop the oldest read-ahead beyond :data:`AHEAD_LIMIT` (never consumed)."""
        while self._ahead_bytes > AHEAD_LIMIT:
            rel = next(iter(self._ahead))
            s, e, fut = self._ahead[rel].pop(0)
            fut.cancel()
            self._ahead_bytes -= e - s
            if not self._ahead[rel]:
                del self._ahead[rel]

    def _from_ahead(self, rel: str, gaps: list[Gap]) -> tuple[list[Piece], list[Gap]]:
        """Parts of ``gaps`` the read-ahead holds or is fetching (waited for, then dropped:
        each byte is read once)."""
        with self._lock:
            pending = self._ahead.get(rel)
            if not pending:
                return [], gaps
            used = [(s, e, fut) for s, e, fut in pending if any(s < b and a < e for a, b in gaps)]
            for item in used:
                pending.remove(item)
                self._ahead_bytes -= item[1] - item[0]
        pieces: list[Piece] = []
        for s, _, fut in used:
            try:
                pieces.append((s, fut.result()))
            except Exception:
                continue
        rest: list[Gap] = []
        for a, b in gaps:
            _, missing = split(a, b, sorted(pieces))
            rest += missing
        return pieces, rest

    # -- the listing ------------------------------------------------------------------------
    def changed(self) -> bool:
        """Whether the URL now lists other objects, sizes or ETags (a new listing; an object
        without an ETag counts as changed)."""
        fresh = Backend(self.backend.url, self.backend.options)
        now, entry = list_objects(fresh)
        if entry is not None and _is_index(entry) and now.get(entry) == self.files.get(entry):
            now.update(fresh.infos(sorted(set(self.files) - {entry})))  # the same index
        if any(f.etag is None for f in now.values()):
            return True
        return {k: (f.size, f.etag) for k, f in now.items()} != {
            k: (f.size, f.etag) for k, f in self.files.items()
        }

    def close(self) -> None:
        """Drop the read-ahead not taken yet (pending fetches are cancelled)."""
        with self._lock:
            pending = [fut for items in self._ahead.values() for _, _, fut in items]
            self._ahead.clear()
            self._ahead_bytes = 0
        for fut in pending:
            fut.cancel()

    def __repr__(self) -> str:
        return f"FsspecStore({self.backend.shown!r}, {len(self.files)} objects)"


_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def _ahead_pool() -> ThreadPoolExecutor:
    """The read-ahead threads, shared by every store of the process."""
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(AHEAD_WORKERS, "ckpt-read-ahead"))
        return _POOL[0]


def open_url(
    url: str, storage_options: dict[str, Any] | None = None, cache: str | None = None
) -> Location:
    """The location of ``url`` in a new store holding what its listing found.

    Raises:
        MissingDependencyError: fsspec or the scheme's backend is not installed.
        RemoteError: nothing at the URL, access refused, a failing connection.
    """
    backend = Backend(url, storage_options)
    files, entry = list_objects(backend)
    store = FsspecStore(backend, files, DiskCache(cache) if cache else None)
    if entry is not None and _is_index(entry):
        store = _with_shards(store, entry)
    elif entry is not None and (siblings := split_names(entry)):
        store = _with_files(store, [s for s in siblings if s != entry])
    return store.location(entry or "")


def list_objects(backend: Backend) -> tuple[dict[str, RemoteFile], str | None]:
    """``({relative name: object}, entry)``: a folder's objects (entry None), or a single
    object as ``{name: object}`` with ``entry = name`` (the store's root is then its folder)."""
    info = backend.info(backend.path, "an existing object or folder")
    if not backend.is_folder(info):
        name = backend.path.rsplit("/", 1)[-1]
        backend.root_at_parent()
        return {name: backend.remote_file(info, f"{backend.path}/{name}")}, name
    found = backend.find_files()
    if not found:
        raise RemoteError(backend.shown, "a folder with files", "an empty folder", "Check the URL.")
    return found, None


def _is_index(name: str) -> bool:
    return name.endswith(".index.json")


def _with_shards(store: FsspecStore, index: str) -> FsspecStore:
    """An index URL: the index and the shards its ``weight_map`` names (names that would
    leave the folder are left to the reader to refuse)."""
    data = store.location(index).read_bytes()
    try:
        shards = set(json.loads(data).get("weight_map", {}).values())
    except (ValueError, AttributeError, TypeError):
        shards = set()  # the reader reports the malformed index
    safe = sorted(
        s
        for s in shards
        if isinstance(s, str) and s and not s.startswith(("/", "\\")) and ".." not in s
    )
    return _with_files(store, safe)


def _with_files(store: FsspecStore, names: list[str]) -> FsspecStore:
    """``store`` with the objects ``names`` beside its entry, those that exist (a file URL is
    its own root: what its reader must find beside it, an index's shards or the other files of
    a split GGUF set, is asked for by name; a missing one is the reader's to report)."""
    store.files.update(store.backend.infos(names))
    rebuilt = FsspecStore(store.backend, store.files, store.cache)
    rebuilt.memory = store.memory  # the bytes already read are kept
    return rebuilt
