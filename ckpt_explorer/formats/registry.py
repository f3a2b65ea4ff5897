"""The registry of checkpoint families: each entry knows how to recognise and open one.

A new format is one reader module plus one :func:`register` call in ``formats/__init__.py``.
Probes run in priority order (lower first) and the first that recognises the path wins
(:func:`~.detect.detect`); every probe decides by content (magic bytes, JSON keys, pickle
structure), never by extension. An entry's probe is a reader's (one family) or a composite
probe of ``formats/`` that works over the other entries' results (see ``formats/__init__.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..io.location import Location
from ..types import Detection
from ..view import CheckpointView

Probe = Callable[[Location], Detection | None]
Opener = Callable[[Location, Detection], CheckpointView]


@dataclass(frozen=True)
class FormatSpec:
    """One entry: ``probe(path)`` returns a Detection or None; ``open(path, detection)``."""

    name: str
    families: tuple[str, ...]
    target: str  # "file" or "dir"
    priority: int
    probe: Probe
    open: Opener


_REGISTRY: list[FormatSpec] = []


def register(spec: FormatSpec) -> None:
    """Add ``spec``; entries stay in priority order (folder entries before file entries of the
    same priority: they never compete, a path is one or the other)."""
    _REGISTRY.append(spec)
    _REGISTRY.sort(key=lambda s: (s.priority, s.target != "dir"))


def specs(target: str | None = None) -> list[FormatSpec]:
    return [s for s in _REGISTRY if target is None or s.target == target]


def spec_for(detection: Detection, target: str) -> FormatSpec:
    for spec in specs(target):
        if detection.family in spec.families:
            return spec
    raise KeyError(detection.family)
