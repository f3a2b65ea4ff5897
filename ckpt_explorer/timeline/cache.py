"""Summaries cached per file identity, so reopening a run reads no tensor.

A checkpoint's identity is, for each of its files: the relative path, size, ``mtime_ns`` and a
hash of the first 16 KiB (the header: safetensors JSON, zip directory start, pickle opening).
A pair's key is the two identities. Entries are small JSON files named by the key's hash; a
changed file gets a new identity, so stale entries are never read (they are simply left).

The default folder is ``$XDG_CACHE_HOME/ckpt_explorer/timeline`` (``~/.cache/...``): the cache
is never written into the run folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

CACHE_VERSION = "timeline-8"
HEADER_BYTES = 16 * 1024


def default_cache_dir() -> Path:
    """``$CKPT_EXPLORER_CACHE/timeline``, else ``$XDG_CACHE_HOME/ckpt_explorer/timeline``,
    else ``~/.cache/ckpt_explorer/timeline``: never inside the run folder."""
    own = os.environ.get("CKPT_EXPLORER_CACHE")
    if own:
        return Path(own) / "timeline"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ckpt_explorer" / "timeline"


def checkpoint_files(path: Path) -> list[Path]:
    """The files of a checkpoint file or folder, in a stable order."""
    if path.is_file():
        return [path]
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        out += [Path(dirpath) / f for f in sorted(filenames)]
    return out


def identity(path: Path, files: list[Path] | None = None) -> tuple[str, float]:
    """(identity hash, newest mtime in seconds) of a checkpoint file or folder, or of a
    checkpoint saved as one file per part (``files``; ``path`` is then its name)."""
    digest = hashlib.sha256(f"{CACHE_VERSION}\0{path.resolve()}".encode())
    if files is not None:
        digest.update(b"\0parts")  # model_35.pt alone as a part names its tensors model/...
    newest = 0
    for f in files if files is not None else checkpoint_files(path):
        try:
            st = f.stat()
            with open(f, "rb") as fh:
                head = fh.read(HEADER_BYTES)
        except OSError:
            continue  # vanished while listing (a save in progress): the identity changes
        rel = f.relative_to(path) if files is None and f != path else Path(f.name)
        digest.update(f"\0{rel}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        digest.update(hashlib.sha256(head).digest())
        newest = max(newest, st.st_mtime_ns)
    return digest.hexdigest()[:32], newest / 1e9


class SummaryCache:
    """JSON entries under ``folder`` (None: a memory-only cache for this process)."""

    def __init__(self, folder: str | Path | None) -> None:
        self.folder = Path(folder) if folder is not None else None
        self._memory: dict[str, dict[str, Any]] = {}

    def _file(self, kind: str, key: str) -> Path | None:
        if self.folder is None:
            return None
        return self.folder / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:40]}.json"

    def get(self, kind: str, key: str) -> dict[str, Any] | None:
        mem = self._memory.get(f"{kind}:{key}")
        if mem is not None:
            return mem
        path = self._file(kind, key)
        if path is None or not path.is_file():
            return None
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # a torn or foreign file: recompute
        if not isinstance(doc, dict) or doc.get("key") != key:
            return None
        value = doc.get("value")
        return value if isinstance(value, dict) else None

    def put(self, kind: str, key: str, value: dict[str, Any]) -> None:
        self._memory[f"{kind}:{key}"] = value
        path = self._file(kind, key)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"key": key, "value": value}), encoding="utf-8")
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only cache folder: the timeline still works, just uncached
