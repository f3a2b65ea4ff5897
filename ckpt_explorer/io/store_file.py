"""A seekable, buffered file object over a store's range reads (for stores without OS files).

Parsers (``zipfile``, the allow-list unpickler, ``json``) read through it as through a local
file; each miss of the buffer becomes one :meth:`Store.read` of at least ``buffer_size``
bytes, which the store may answer from what it kept.
"""

from __future__ import annotations

import io
from pathlib import PurePath
from typing import TYPE_CHECKING, BinaryIO

from .seekable_raw import SeekableRaw

if TYPE_CHECKING:
    from .store import Store

BUFFER = 64 * 2**10


class StoreRawFile(SeekableRaw):
    """Unbuffered reads of one object of ``store`` (``size`` bytes long)."""

    def __init__(self, store: Store, path: PurePath, size: int) -> None:
        super().__init__(size, strict=True)
        self._store = store
        self._path = path

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        want = min(len(buffer), max(0, self._size - self._pos))
        if want <= 0:
            return 0
        data = self._store.read(self._path, self._pos, self._pos + want)
        n = len(data)
        memoryview(buffer).cast("B")[:n] = data
        self._pos += n
        return n

    def readall(self) -> bytes:
        data = self._store.read(self._path, self._pos, max(self._pos, self._size))
        self._pos += len(data)
        return data


def open_store_file(store: Store, path: PurePath, size: int) -> BinaryIO:
    """A buffered reader over :class:`StoreRawFile` (``readline`` and ``peek`` work)."""
    raw = StoreRawFile(store, path, size)
    return io.BufferedReader(raw, buffer_size=BUFFER)  # type: ignore[return-value]
