"""Which arguments are remote URLs, and how to show one without its secrets."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from .registry import spec_for_scheme

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def scheme(text: str) -> str | None:
    """The URL scheme of ``text`` (lower case) when a registered store reads it."""
    m = _URL.match(str(text))
    if m is None:
        return None
    s = m.group(1).lower()
    return s if spec_for_scheme(s) is not None else None


def is_url(text: object) -> bool:
    return isinstance(text, str) and scheme(text) is not None


def public(url: str) -> str:
    """``url`` without user:password and without its query string (signed URLs carry tokens)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def name_of(url: str) -> str:
    """The last path component of ``url`` (the bucket or repo for a root URL)."""
    path = urlsplit(url).path.rstrip("/")
    tail = path.rsplit("/", 1)[-1] if path else urlsplit(url).netloc
    return tail or "checkpoint"
