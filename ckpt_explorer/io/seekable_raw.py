"""The position keeping every read-only raw file of the package shares (a store object, a
slice of an open file, a slice of a buffer): subclasses give only ``readinto``."""

from __future__ import annotations

import io


class SeekableRaw(io.RawIOBase):
    """A read-only, seekable raw file ``size`` bytes long; ``seek`` before byte 0 goes to 0,
    or raises ``OSError`` (as an OS file does) when ``strict``."""

    def __init__(self, size: int, *, strict: bool = False) -> None:
        super().__init__()
        self._size, self._strict, self._pos = size, strict, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        pos = base + offset
        if pos < 0 and self._strict:
            raise OSError(22, f"negative seek position {pos}")
        self._pos = max(0, pos)
        return self._pos
