"""Helpers shared by the conversion tests."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def snapshot(path: Path) -> dict[str, tuple[str, int, int]]:
    """rel path -> (sha256, mtime_ns, size) of every file under ``path`` (or the file)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    out = {}
    for p in files:
        st = os.stat(p)
        rel = p.name if p == path else p.relative_to(path).as_posix()
        out[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mtime_ns, st.st_size)
    return out


def tree_bytes(path: Path) -> dict[str, bytes]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {p.relative_to(path).as_posix() if p != path else p.name: p.read_bytes() for p in files}
