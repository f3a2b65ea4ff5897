"""A URL opened by the registered store that accepts it."""

from __future__ import annotations

from typing import Any

from ..io.location import Location
from .registry import specs


def open_location(
    url: str, storage_options: dict[str, Any] | None = None, cache: str | None = None
) -> Location:
    """``url`` opened by the store that accepts it (through fsspec unless its spec says how).

    Raises:
        ValueError: no registered store reads ``url``.
        MissingDependencyError: fsspec or the scheme's backend is not installed.
        RemoteError: nothing at the URL, access refused, a failing connection.
    """
    spec = next((s for s in specs() if s.accepts(url)), None)
    if spec is None:
        raise ValueError(f"no registered store reads {url.partition('://')[0]}:// URLs")
    if spec.open is not None:
        return spec.open(url, storage_options, cache)
    from .store import open_url

    return open_url(url, storage_options, cache)
