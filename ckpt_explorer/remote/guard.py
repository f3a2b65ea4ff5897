"""The safety net under remote mirrors: tensor bytes that were never fetched are never read.

A mirror is a folder of sparse files; a hole reads as zeros. :func:`check_range` is called by
:class:`~ckpt_explorer.io.mapped.MappedFile` before it maps tensor bytes: inside a registered
mirror, a range that is not (fully) fetched raises :class:`HoleReadError` instead.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Protocol

from ..errors import CkptExplorerError


class HoleReadError(CkptExplorerError):
    """A read of bytes that a remote mirror has not fetched (they would read as zeros)."""

    def __init__(self, path: Path, url: str, start: int, end: int) -> None:
        self.file = Path(path)
        self.start, self.end = start, end
        super().__init__(
            url,
            f"bytes {start}..{end} fetched before they are read",
            "a range that was never downloaded (it would read as zeros)",
            "This is a bug in ckpt_explorer's remote reading; please report it.",
        )


class RangeOwner(Protocol):
    def check(self, path: Path, start: int, end: int) -> None: ...


_mirrors: dict[str, RangeOwner] = {}
_lock = threading.Lock()


def register(root: Path, owner: RangeOwner) -> None:
    with _lock:
        _mirrors[os.path.abspath(root)] = owner


def unregister(root: Path) -> None:
    with _lock:
        _mirrors.pop(os.path.abspath(root), None)


def is_mirrored(path: Path) -> bool:
    """True when ``path`` lies in a registered mirror (a remote checkpoint's partial copy)."""
    if not _mirrors:
        return False
    text = os.path.abspath(path)
    with _lock:
        return any(text == root or text.startswith(root + os.sep) for root in _mirrors)


def check_range(path: Path, offset: int, nbytes: int) -> None:
    """Raise :class:`HoleReadError` if ``[offset, offset + nbytes)`` of ``path`` is a hole."""
    if not _mirrors:
        return
    text = os.path.abspath(path)
    with _lock:
        owners = [o for root, o in _mirrors.items() if text.startswith(root + os.sep)]
    for owner in owners:
        owner.check(Path(text), offset, offset + nbytes)
