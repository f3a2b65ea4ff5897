"""Plain values as people read them in reports: ``0.00021``, not ``0.00020999999999999998``.

Floats show at 6 significant digits and whole floats as integers (a step saved as ``6.0`` reads
``6``). Two values that differ are never shown alike: :func:`readable_pair` adds digits until
their texts differ, so evidence such as "lr: A 0.0001, B 0.0001" cannot happen.
"""

from __future__ import annotations

import math
import numbers
import re
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


_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: float, significant: int | None = None) -> str:
    """A byte count in binary units, the one byte formatter of the project: ``1536`` ->
    ``1.5 KiB`` (one decimal, up to TiB: the reports); with ``significant`` digits, up to PiB
    (the dashboard's 3): ``252 MiB``, ``74.5 GiB``, ``12 B``."""
    x = float(n)
    units = _BINARY if significant else _BINARY[:-1]
    for unit in units:
        if abs(x) < 1024 or unit == units[-1]:
            break
        x /= 1024
    if unit == "B":
        return f"{int(x)} B" if significant else f"{x:.0f} B"
    return f"{x:.{significant}g} {unit}" if significant else f"{x:.1f} {unit}"


def parse_size(text: str) -> int:
    """The one size parser: ``"80GB"`` -> 80e9 bytes, ``"80GiB"`` -> 80 * 2**30, ``"5K"`` ->
    5000, ``"1024"`` -> 1024; ValueError when unreadable."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"size {text!r}: expected a number with a unit such as 80GB or 80GiB")
    unit = (m.group(2) or "").upper()
    if unit and not unit.endswith("B"):
        unit += "B"
    return int(float(m.group(1)) * _UNITS[unit])


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS.update({"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40})
