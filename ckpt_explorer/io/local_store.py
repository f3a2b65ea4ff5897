"""The local store: plain files on this machine, read with ``pread`` and mapped for tensors."""

from __future__ import annotations

import contextlib
import os
import stat as stat_module
from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import BinaryIO

from .store import DIR, FILE, StatResult


class LocalStore:
    """Files of the local file system; paths are OS paths, shown as given."""

    def shown(self, path: PurePath) -> str:
        return str(path)

    def entry_type(self, path: PurePath) -> str | None:
        try:
            mode = os.stat(path).st_mode
        except (OSError, ValueError):
            return None
        if stat_module.S_ISDIR(mode):
            return DIR
        return FILE if stat_module.S_ISREG(mode) else None

    def is_link(self, path: PurePath) -> bool:
        return os.path.islink(path)

    def children(self, path: PurePath) -> list[str]:
        return os.listdir(path)

    def stat(self, path: PurePath) -> StatResult:
        return os.stat(path)

    def read(self, path: PurePath, start: int, end: int, keep: bool = True) -> bytes:
        fd = os.open(path, os.O_RDONLY)
        try:
            return _pread(fd, start, end)
        finally:
            os.close(fd)

    def read_ranges(
        self, path: PurePath, ranges: Sequence[tuple[int, int]], keep: bool = True
    ) -> list[bytes]:
        fd = os.open(path, os.O_RDONLY)
        try:
            return [_pread(fd, start, end) for start, end in ranges]
        finally:
            os.close(fd)

    def open(self, path: PurePath) -> BinaryIO:
        return open(path, "rb")

    def local_path(self, path: PurePath) -> Path | None:
        return Path(path)

    def will_need(self, path: PurePath, start: int, end: int) -> None:
        if not hasattr(os, "posix_fadvise"):
            return
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_WILLNEED)
            finally:
                os.close(fd)

    def resolve(self, path: PurePath) -> PurePath:
        return Path(path).resolve()

    def __repr__(self) -> str:
        return "LocalStore()"


def _pread(fd: int, start: int, end: int) -> bytes:
    """``[start, end)`` of ``fd``; fewer bytes only at the end of the file."""
    if end <= start:
        return b""
    first = os.pread(fd, end - start, start)
    if len(first) == end - start or not first:
        return first
    parts = [first]
    pos = start + len(first)
    while pos < end:
        more = os.pread(fd, end - pos, pos)
        if not more:
            break
        parts.append(more)
        pos += len(more)
    return b"".join(parts)


LOCAL = LocalStore()
