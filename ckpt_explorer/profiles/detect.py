"""The profile of an open view: :func:`detect_profile`."""

from __future__ import annotations

from ..view import CheckpointView
from .evidence import evidence_of
from .registry import match
from .spec import Evidence, ProfileMatch


def detect_profile(view: CheckpointView) -> ProfileMatch:
    """The writer profile of ``view`` with the evidence that decided it (``UNKNOWN`` when no
    profile's detector recognises it). Reads names and plain values only."""
    try:
        evidence = evidence_of(view)
    except Exception:
        evidence = Evidence(name=view.path.name)
    return match(evidence)
