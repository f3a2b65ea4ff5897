"""Plain values as people read them in reports: ``0.00021``, not ``0.00020999999999999998``.

Floats show at 6 significant digits and whole floats as integers (a step saved as ``6.0`` reads
``6``). Two values that differ are never shown alike: :func:`readable_pair` adds digits until
their texts differ, so evidence such as "lr: A 0.0001, B 0.0001" cannot happen.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

DIGITS = 6
MAX_EXACT_INT = 2**53


def readable(v: Any, digits: int = DIGITS) -> str:
    """``v`` (numbers, text, lists, tuples, dicts, None) as one line, floats at ``digits``."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, numbers.Integral):
        return str(int(v))
    if isinstance(v, numbers.Real):
        f = float(v)
        if not math.isfinite(f):
            return str(f)
        if f.is_integer() and abs(f) < MAX_EXACT_INT:
            return str(int(f))
        return f"{f:.{digits}g}"
    if isinstance(v, str):
        return v
    if isinstance(v, list | tuple):
        inner = ", ".join(repr(x) if isinstance(x, str) else readable(x, digits) for x in v)
        return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {readable(x, digits)}" for k, x in v.items()) + "}"
    return str(v)


def readable_pair(a: Any, b: Any) -> tuple[str, str]:
    """``a`` and ``b`` as text, with as many digits as it takes to tell them apart."""
    for digits in (DIGITS, 9, 12, 17):
        ta, tb = readable(a, digits), readable(b, digits)
        if ta != tb or a == b:
            return ta, tb
    return repr(a), repr(b)


def human_bytes(n: float) -> str:
    """A byte count in binary units: ``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
