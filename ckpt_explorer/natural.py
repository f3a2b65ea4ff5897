"""Natural order of names: ``layers.2`` before ``layers.10``, ``expert 9`` before ``expert 10``.

The one sort key for names with numbers in them (tensor names, shard files, experts), used by
the dashboard and by convert's shard packing. Plain string order only where a user asks for it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key: runs of digits compare as numbers (``h.2`` < ``h.10``; ``a01`` == ``a1`` then
    by text, so the order is total). Example: ``sorted(names, key=natural_key)``."""
    parts = _DIGITS.split(name)
    return (*((int(p), p) if i % 2 else p for i, p in enumerate(parts)),)


def natural_sorted(items: Iterable[T], key: Callable[[T], str] = str) -> list[T]:
    """``items`` in natural order of ``key(item)``."""
    return sorted(items, key=lambda x: natural_key(key(x)))


def natural_if_string_ordered(items: list[T], key: Callable[[T], str] = str) -> list[T]:
    """``items`` in natural order when they are in plain string order (an order that was lost,
    as in a safetensors header, which sorts its keys); any other order is kept as it is."""
    names = [key(x) for x in items]
    if all(a <= b for a, b in itertools.pairwise(names)):
        return natural_sorted(items, key)
    return list(items)
