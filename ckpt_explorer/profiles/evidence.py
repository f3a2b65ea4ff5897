"""The evidence a profile is detected from, gathered from an open view (names and plain values
only: no tensor bytes are read, nothing is unpickled beyond what the view already holds)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import islice
from typing import Any

from ..io.location import Location
from ..view import CheckpointView
from .spec import Evidence

MAX_NAMES = 4096  # names read from one folder listing (a pointer sits among a few saves)
FIRST_KEY = re.compile(r"^([^./]+)")


def _names(folder: Location) -> frozenset[str]:
    try:
        if not folder.is_dir():
            return frozenset()
        return frozenset(c.name for c in islice(folder.iterdir(), MAX_NAMES))
    except OSError:
        return frozenset()


def _first(name: str) -> str | None:
    m = FIRST_KEY.match(name)
    return m.group(1) if m else None


def _kinds(view: CheckpointView, depth: int = 0) -> Iterator[str]:
    for part in view.parts.values():
        yield part.kind
        if depth < 2:
            yield from _kinds(part, depth + 1)


def evidence_of(view: CheckpointView) -> Evidence:
    """The :class:`Evidence` of ``view``: its name, folder listing and siblings, top-level
    keys, plain values and part kinds."""
    path = view.path
    values: dict[str, Any] = dict(view.values)
    keys = set(view.parts)
    for name in [*values, *view.tensors.column("name")]:  # names only: no record is made
        first = _first(name)
        if first:
            keys.add(first)
    try:
        parent = path.parent if path.parent != path else None
    except Exception:
        parent = None
    return Evidence(
        name=path.name,
        files=_names(path),
        siblings=_names(parent) if parent is not None else frozenset(),
        keys=frozenset(keys),
        values=values,
        kinds=frozenset(_kinds(view)) | {view.kind},
    )
