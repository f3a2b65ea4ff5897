"""Was A a stale pointer copy? ``last.ckpt`` / ``latest.pt`` older than the newest step beside it.

Training loops keep a copy (or link) named ``last`` / ``latest`` beside their step checkpoints
and resume from it. When that copy was not refreshed after the newest save (the copy failed, a
script wrote it only every other save, a link was made before the last save), resuming from it
repeats steps and throws away the newest ones. The newest sibling is found by the step in its
name and confirmed by the step it records.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..io.location import Location

POINTER = re.compile(r"(^|[-_.])(last|latest)([-_.]|$)", re.IGNORECASE)
STEP = re.compile(r"(?:step|iter|global_step|checkpoint)[=_-]?(\d+)", re.IGNORECASE)
NUMBER = re.compile(r"(\d+)")


POINTER_FILES = ("last_checkpoint", "latest")  # mmengine's, DeepSpeed's: a path or a tag
MAX_POINTER_BYTES = 4096


def is_pointer(path: Location) -> bool:
    """A ``last`` / ``latest`` name (``last.ckpt``, ``last-v1.ckpt``, ``checkpoint_latest.pt``)."""
    stem = path.name.split(".", 1)[0] if path.is_file() else path.name
    return bool(POINTER.search(stem))


def pointed_by(path: Location) -> Location | None:
    """The pointer file beside ``path`` that names it (mmengine's ``last_checkpoint`` holds a
    path, DeepSpeed's ``latest`` a tag folder's name); None when none does."""
    for name in POINTER_FILES:
        ptr = path.parent / name
        try:
            if not ptr.is_file():
                continue
            with ptr.open("rb") as f:
                text = f.read(MAX_POINTER_BYTES).decode("utf-8", "replace").strip()
        except OSError:
            continue
        if text and text.replace("\\", "/").rstrip("/").split("/")[-1] == path.name:
            return ptr
    return None


def _named_step(path: Location) -> int | None:
    found = STEP.findall(path.name) or NUMBER.findall(path.name)
    return int(found[-1]) if found else None


def newer_sibling(
    path: Location, step: float, recorded: Callable[[Location], float | None]
) -> tuple[Location, float] | None:
    """The newest sibling of pointer ``path`` whose recorded step (``recorded``) is past
    ``step``, the pointer's own; None when ``path`` is no pointer or nothing newer is beside
    it."""
    if not is_pointer(path) and pointed_by(path) is None:
        return None
    suffix = path.suffix if path.is_file() else ""
    named = []
    for sib in path.parent.iterdir():
        if sib == path or is_pointer(sib) or sib.name in POINTER_FILES:
            continue
        if sib.is_file() != path.is_file():
            continue
        if sib.suffix != suffix:
            continue
        n = _named_step(sib)
        if n is not None and n > step:
            named.append((n, sib))
    for _, sib in sorted(named, reverse=True)[:2]:
        try:
            found = recorded(sib)
        except Exception:
            continue
        if found is not None and found > step:
            return sib, found
    return None
