"""The registry of writer profiles, in the idiom of ``formats/registry.py``.

A new writer is one module with one :class:`~.spec.WriterProfile` plus one :func:`register`
call in ``profiles/__init__.py``. Detectors run in priority order (lower first); the first
whose detector returns evidence wins; none matching gives :data:`~.spec.UNKNOWN`.
"""

from __future__ import annotations

from .spec import UNKNOWN, Evidence, ProfileMatch, WriterProfile

_REGISTRY: list[WriterProfile] = []


def register(profile: WriterProfile) -> None:
    """Add ``profile`` (a name registered twice replaces the first: reloads stay idempotent)."""
    _REGISTRY[:] = [p for p in _REGISTRY if p.name != profile.name]
    _REGISTRY.append(profile)
    _REGISTRY.sort(key=lambda p: (p.priority, p.name))


def profiles() -> list[WriterProfile]:
    """Every registered profile, in detection order."""
    return list(_REGISTRY)


def profile(name: str) -> WriterProfile:
    """The registered profile called ``name`` (:data:`UNKNOWN` for ``"unknown"``)."""
    for p in _REGISTRY:
        if p.name == name:
            return p
    if name == UNKNOWN.name:
        return UNKNOWN
    raise KeyError(name)


def match(evidence: Evidence) -> ProfileMatch:
    """The first profile whose detector recognises ``evidence``; :data:`UNKNOWN` otherwise.

    A detector that raises is a bug in that profile, never a reason to fail the caller: it
    counts as no match.
    """
    for p in _REGISTRY:
        try:
            reasons = p.detect(evidence)
        except Exception:
            reasons = None
        if reasons:
            return ProfileMatch(p, tuple(reasons), evidence)
    return ProfileMatch(UNKNOWN, (), evidence)
