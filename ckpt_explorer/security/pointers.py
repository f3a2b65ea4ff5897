"""Files that a loader reads to find what to load next, resolved as that loader resolves them.

* DeepSpeed's ``latest`` / ``latest_universal``: ``load_checkpoint`` reads the tag
  (``read().strip()``) and loads ``os.path.join(load_dir, tag)``: an absolute tag or one with
  ``..`` leaves the folder;
* mmengine's ``last_checkpoint``: ``find_latest_checkpoint`` returns its stripped text and
  the runner resumes from that path as it is (mmengine writes an absolute path into the work
  dir; a relative one is taken relative to the pointer's folder here);
* a ``.git`` *file* (a submodule's or worktree's): git reads ``gitdir: <path>`` (relative to
  the file's folder) and runs the commands that folder's ``config`` and ``hooks/`` name;
* sharded index files (``*.index.json``): accelerate's ``load_checkpoint_in_model`` loads
  ``os.path.join(<index folder>, shard)`` for every ``weight_map`` value (or every value, when
  the index is the map itself) without checking them; transformers refuses absolute and
  ``..`` names, older releases did not.

A target that resolves (links followed, as the OS follows them) outside every scanned root
makes the pointer file ``unverified``: the loader reads bytes this scan did not judge. A
target that is missing, or inside the root (judged there), changes nothing. Megatron's
``latest_checkpointed_iteration.txt`` is not listed: its loader accepts only an integer or
``release`` and formats the folder name itself. DCP's ``.metadata`` paths are checked by
:mod:`.dcp_items`, links by :mod:`.tree`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_MAX_POINTER = 4096  # a longer name cannot be opened (PATH_MAX): the loader fails
_MAX_INDEX = 64 * 2**20
DEEPSPEED_TAGS = ("latest", "latest_universal")


@dataclass(frozen=True)
class Pointer:
    """A pointer file, the target it names as written and as the loader resolves it."""

    file: Path
    loader: str  # which loader follows it, in words
    target: str
    resolved: str

    def message(self, label: str) -> str:
        return (
            f"{label}: {self.loader} loads {self.target!r} from here, which resolves to "
            f"{self.resolved}, outside the scanned folder: the loader reads bytes this scan did "
            "not judge (scan that target too)"
        )


def pointers_out(path: Path, roots: list[str]) -> list[Pointer]:
    """The pointers of one file whose targets lead outside every scanned root (real paths)."""
    name = path.name
    if name in DEEPSPEED_TAGS:
        tags = _text(path)
        found = [_out(path, "DeepSpeed's load_checkpoint (the checkpoint tag)", t, roots)
                 for t in tags]  # fmt: skip
    elif name == "last_checkpoint":
        found = [_mmengine(path, t, roots) for t in _text(path)]
    elif name == ".git":
        loader = "git (a .git file's gitdir: line: it reads that folder's config and hooks)"
        found = [_out(path, loader, t[8:], roots) for t in _text(path) if t.startswith("gitdir: ")]
    elif name.endswith(".index.json"):
        found = [
            _out(path, "accelerate's load_checkpoint_in_model (a shard of this index)", s, roots)
            for s in _shards(path)
        ]
    else:
        return []
    return [p for p in found if p is not None]


def _text(path: Path) -> list[str]:
    """The stripped text a loader's ``open(path).read().strip()`` gets (none: it fails)."""
    try:
        if not path.is_file() or path.stat().st_size > 1 << 20:
            return []
        raw = path.read_bytes()
    except OSError:
        return []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")  # a single-byte locale reads any bytes
    text = text.strip()
    if not text or "\0" in text or len(text) > _MAX_POINTER:
        return []
    return [text]


def _shards(path: Path) -> list[str]:
    try:
        if path.stat().st_size > _MAX_INDEX:
            return []
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return []
    if not isinstance(doc, dict):
        return []
    wmap: Any = doc.get("weight_map", doc)
    if not isinstance(wmap, dict):
        return []
    return sorted({v for v in wmap.values() if isinstance(v, str) and v and "\0" not in v})


def _inside(real: str, roots: list[str]) -> bool:
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _out(path: Path, loader: str, target: str, roots: list[str]) -> Pointer | None:
    joined = os.path.join(path.parent, target)
    real = os.path.realpath(joined)
    if _inside(real, roots):
        return None
    return Pointer(path, loader, target, real)


def _mmengine(path: Path, target: str, roots: list[str]) -> Pointer | None:
    loader = "mmengine's resume (find_latest_checkpoint)"
    found = _out(path, loader, target, roots)
    if found is None:
        return None
    moved = os.path.isabs(target) and not os.path.exists(target)
    if moved and (path.parent / os.path.basename(target)).exists():
        return None  # a moved work dir: mmengine wrote its old absolute path (resuming fails)
    return found


__all__ = ["DEEPSPEED_TAGS", "Pointer", "pointers_out"]
