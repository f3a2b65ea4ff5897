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


def is_pointer(path: Location) -> bool:
    """A ``last`` / ``latest`` name (``last.ckpt``, ``last-v1.ckpt``, ``checkpoint_latest.pt``)."""
    stem = path.name.split(".", 1)[0] if path.is_file() else path.name
    return bool(POINTER.search(stem))


def _named_step(path: Location) -> int | None:
    found = STEP.findall(path.name) or NUMBER.findall(path.name)
    return int(found[-1]) if found else None


def newer_sibling(
    path: Location, step: float, recorded: Callable[[Location], float | None]
) -> tuple[Location, float] | None:
    """The newest sibling of pointer ``path`` whose recorded step (``recorded``) is past
    ``step``, the pointer's own; None when ``path`` is no pointer or nothing newer is beside
    it."""
    if not is_pointer(path):
        return None
    suffix = path.suffix if path.is_file() else ""
    named = []
    for sib in path.parent.iterdir():
        if sib == path or is_pointer(sib) or sib.is_file() != path.is_file():
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
