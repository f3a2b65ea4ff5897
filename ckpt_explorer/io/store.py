"""The byte store under the readers: where a checkpoint's bytes come from.

A :class:`Store` answers for paths inside it (a local store takes OS paths; a remote one takes
paths relative to the URL it was opened at): what is there, how large, and the bytes of a
range. Readers never see a store directly: they hold a :class:`~.location.Location` (a store
and a path), which reads like :class:`pathlib.Path`.

Call order: a store is made (a remote one lists its objects once, pinning each object's size
and ETag), then any method may be called from any thread, in any order.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import BinaryIO, NamedTuple, Protocol

FILE = "file"
DIR = "dir"


# Protocols of property stubs: alike in shape with readers/quantized/parts.Stored (declarations)
class StatResult(Protocol):
    """The part of :class:`os.stat_result` that readers use."""

    @property
    def st_size(self) -> int: ...

    @property
    def st_mtime(self) -> float: ...

    @property
    def st_mtime_ns(self) -> int: ...

    @property
    def st_mode(self) -> int: ...


class StoreStat(NamedTuple):
    """A stat result for an object that has no OS file (``st_mtime_ns`` tells versions apart)."""

    st_size: int
    st_mtime: float
    st_mtime_ns: int
    st_mode: int


class Store(Protocol):
    """Byte access for the paths of one place (a local file system, or one remote URL)."""

    def shown(self, path: PurePath) -> str:
        """``path`` as a person should see it: the OS path, or the public URL."""
        ...

    def entry_type(self, path: PurePath) -> str | None:
        """:data:`FILE`, :data:`DIR`, or None when nothing is there."""
        ...

    def is_link(self, path: PurePath) -> bool: ...

    def children(self, path: PurePath) -> list[str]:
        """Names of the entries of a folder (unsorted)."""
        ...

    def stat(self, path: PurePath) -> StatResult: ...

    def read(self, path: PurePath, start: int, end: int, keep: bool = True) -> bytes:
        """Bytes ``[start, end)`` of a file (fewer only at its end).

        Args:
            keep: the bytes are structure that parsers may read again (headers, pickles):
                a remote store keeps them in memory; tensor data is read with ``keep=False``.
        """
        ...

    def read_ranges(
        self, path: PurePath, ranges: Sequence[tuple[int, int]], keep: bool = True
    ) -> list[bytes]:
        """Bytes of each ``(start, end)`` range of one file (a remote store fetches them in
        one batch of concurrent requests)."""
        ...

    def open(self, path: PurePath) -> BinaryIO:
        """A seekable binary file object (buffered; a remote one reads ahead)."""
        ...

    def local_path(self, path: PurePath) -> Path | None:
        """The OS path of ``path`` where one exists (mmap, ``posix_fadvise``, byte copies)."""
        ...

    def will_need(self, path: PurePath, start: int, end: int) -> None:
        """A hint: ``[start, end)`` is read soon (a remote store fetches it in the background,
        to be consumed by the read that asks for it)."""
        ...

    def resolve(self, path: PurePath) -> PurePath:
        """``path`` with links and ``..`` resolved (a remote store has no links)."""
        ...
