"""Parse a file once per version: results kept by (path, mtime, size)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from .location import Location, PathLike, as_location

T = TypeVar("T")


def cached_by_stat(maxsize: int) -> Callable[[Callable[[Location], T]], Callable[[PathLike], T]]:
    """Decorate ``read(path)``: computed once per (path, mtime, size), the ``maxsize`` latest
    kept; a rewritten file is read again."""

    def wrap(read: Callable[[Location], T]) -> Callable[[PathLike], T]:
        @functools.lru_cache(maxsize=maxsize)
        def cached(path: Location, mtime_ns: int, size: int) -> T:
            return read(path)

        @functools.wraps(read)
        def get(path: PathLike) -> T:
            path = as_location(path)
            st = path.stat()
            return cached(path, st.st_mtime_ns, st.st_size)

        return get

    return wrap
