"""A path inside a byte store, with the :class:`pathlib.Path` subset that readers use.

``str(location)`` is what a person should see: the local path as given, or the public URL of
a remote object (no secrets). :meth:`Location.local_path` gives a real OS path only where one
exists (mmap, ``posix_fadvise`` and byte-copy fast paths); readers read through the location.

Example:
    >>> loc = as_location("ckpt")                        # doctest: +SKIP
    >>> (loc / "model.safetensors").read_range(0, 8)     # doctest: +SKIP
"""

from __future__ import annotations

import fnmatch
import io
import os
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePath, PurePosixPath
from typing import IO, Any

from .local_store import LOCAL
from .store import DIR, FILE, StatResult, Store


class Location:
    """``store`` and a path in it (an OS path for the local store, relative for a remote one).

    Equal to the :class:`pathlib.Path` of the same local file (and hashed alike), so local
    locations and paths mix in sets and comparisons.
    """

    __slots__ = ("pure", "store")

    def __init__(self, store: Store, pure: PurePath) -> None:
        self.store = store
        self.pure = pure

    # -- pure path operations ---------------------------------------------------------------
    def _with(self, pure: PurePath) -> Location:
        return Location(self.store, pure)

    def __truediv__(self, name: str | PurePath) -> Location:
        return Location(self.store, self.pure / name)

    def joinpath(self, *names: str | PurePath) -> Location:
        return Location(self.store, self.pure.joinpath(*names))

    @property
    def name(self) -> str:
        return self.pure.name

    @property
    def suffix(self) -> str:
        return self.pure.suffix

    @property
    def suffixes(self) -> list[str]:
        return self.pure.suffixes

    @property
    def stem(self) -> str:
        return self.pure.stem

    @property
    def parts(self) -> tuple[str, ...]:
        return self.pure.parts

    @property
    def parent(self) -> Location:
        return Location(self.store, self.pure.parent)

    @property
    def parents(self) -> list[Location]:
        return [Location(self.store, p) for p in self.pure.parents]

    def with_name(self, name: str) -> Location:
        return Location(self.store, self.pure.with_name(name))

    def with_suffix(self, suffix: str) -> Location:
        return Location(self.store, self.pure.with_suffix(suffix))

    def match(self, pattern: str) -> bool:
        return self.pure.match(pattern)

    def as_posix(self) -> str:
        return self.pure.as_posix()

    def relative_to(self, other: Location | PurePath | str) -> PurePath:
        """This path relative to ``other`` (a location of the same store, or a path)."""
        base = other.pure if isinstance(other, Location) else PurePath(other)
        return self.pure.relative_to(base)

    def is_relative_to(self, other: Location | PurePath | str) -> bool:
        try:
            self.relative_to(other)
        except ValueError:
            return False
        return True

    # -- what is there ------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.store.entry_type(self.pure) is not None

    def is_file(self) -> bool:
        return self.store.entry_type(self.pure) == FILE

    def is_dir(self) -> bool:
        return self.store.entry_type(self.pure) == DIR

    def is_symlink(self) -> bool:
        return self.store.is_link(self.pure)

    def iterdir(self) -> Iterator[Location]:
        store, pure = self.store, self.pure
        if store is LOCAL:  # pathlib's own listing: its children are made without re-parsing
            for p in (pure if isinstance(pure, Path) else Path(pure)).iterdir():
                yield Location(store, p)
            return
        for name in store.children(pure):
            yield Location(store, pure / name)

    def glob(self, pattern: str) -> Iterator[Location]:
        """Entries matching ``pattern`` (``*``, ``?``, ``[...]`` per part; ``**`` any depth)."""
        local = self.store.local_path(self.pure)
        if local is not None:
            for p in local.glob(pattern):
                yield Location(self.store, p)
            return
        yield from self._glob(PurePosixPath(pattern).parts)

    def rglob(self, pattern: str) -> Iterator[Location]:
        return self.glob(f"**/{pattern}")

    def _glob(self, parts: Sequence[str]) -> Iterator[Location]:
        if not parts:
            yield self
            return
        first, rest = parts[0], parts[1:]
        if first == "**":
            yield from self._glob(rest)
            for child in sorted(self.iterdir()):
                if child.is_dir():
                    yield from child._glob(parts)
            return
        for child in sorted(self.iterdir()):
            if fnmatch.fnmatchcase(child.name, first) and (not rest or child.is_dir()):
                yield from child._glob(rest)

    def stat(self) -> StatResult:
        return self.store.stat(self.pure)

    def size(self) -> int:
        return self.store.stat(self.pure).st_size

    def resolve(self) -> Location:
        return Location(self.store, self.store.resolve(self.pure))

    def absolute(self) -> Location:
        local = self.store.local_path(self.pure)
        return Location(self.store, local.absolute()) if local is not None else self

    # -- bytes ----------------------------------------------------------------------------
    def open(self, mode: str = "rb", encoding: str | None = None) -> IO[Any]:
        """A seekable file object for reading (``"rb"``, or ``"r"`` for text)."""
        if mode not in ("rb", "r"):
            raise ValueError(f"locations are read-only: mode {mode!r}")
        raw = self.store.open(self.pure)
        return raw if mode == "rb" else io.TextIOWrapper(raw, encoding=encoding or "utf-8")

    def read_bytes(self) -> bytes:
        return self.store.read(self.pure, 0, self.size())

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read_bytes().decode(encoding, errors)

    def read_range(self, start: int, end: int, keep: bool = True) -> bytes:
        """Bytes ``[start, end)`` (fewer at the end of the file); ``keep=False`` for tensor
        data that is read once."""
        return self.store.read(self.pure, start, end, keep)

    def read_ranges(self, ranges: Sequence[tuple[int, int]], keep: bool = True) -> list[bytes]:
        """Bytes of each ``(start, end)``, fetched together (one batch for a remote file)."""
        return self.store.read_ranges(self.pure, ranges, keep)

    def will_need(self, start: int, end: int) -> None:
        """Hint that ``[start, end)`` is read soon (page cache, or a background fetch)."""
        self.store.will_need(self.pure, start, end)

    def local_path(self) -> Path | None:
        """The OS path, where the bytes are a local file (None for a remote object)."""
        return self.store.local_path(self.pure)

    # -- identity -------------------------------------------------------------------------
    def __str__(self) -> str:
        return self.store.shown(self.pure)

    def __repr__(self) -> str:
        return f"Location({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Location):
            return self.store is other.store and self.pure == other.pure
        if isinstance(other, PurePath) and self.store is LOCAL:
            return self.pure == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.pure) if self.store is LOCAL else hash((id(self.store), self.pure))

    def __lt__(self, other: Location) -> bool:
        if self.store is LOCAL and other.store is LOCAL:  # sorting a local listing
            return self.pure < other.pure
        return self._key() < other._key()

    def __gt__(self, other: Location) -> bool:
        if self.store is LOCAL and other.store is LOCAL:
            return self.pure > other.pure
        return self._key() > other._key()

    def _key(self) -> tuple[int, PurePath]:
        return (0 if self.store is LOCAL else id(self.store), self.pure)


PathLike = str | os.PathLike[str] | Location


def as_location(path: PathLike) -> Location:
    """``path`` as a location: a location stays itself; anything else is a local path."""
    if isinstance(path, Location):
        return path
    return Location(LOCAL, Path(path))
