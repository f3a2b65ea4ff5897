"""Numbers for people: the one display rule of every dashboard table, card and plot.

Floats as 6 significant digits, scientific below 1e-4 and from 1e6 (Python's ``.6g``:
``1e-08``, ``5e-07``, ``1.5e+12``, ``0.00021``), integers (and integral floats such as a step
saved as ``6.0``) as integers, NaN as ``NaN``. Byte sizes in binary units said as such
(``74.5 GiB``); a size the user typed keeps the unit typed (``80 GB``). Tables keep numeric
columns numeric (so they sort by value) and draw them in the browser with :data:`JS_NUMBER`,
the same rule in JavaScript. Lists and dicts read as JSON (``[0.9, 0.999]``, ``null``).
"""

from __future__ import annotations

import math
import numbers
import re
from typing import TYPE_CHECKING, Any

from ..readable import human_bytes

if TYPE_CHECKING:
    import pandas as pd

DIGITS = 6
SCI_FROM = 1e6  # |x| from here on, and below 1e-4, in scientific notation (as ``.6g``)
MAX_TEXT = 160
_DECIMAL = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}

# Tabulator cell formatter: fmt_number in the browser (text cells are escaped, shown as text)
JS_NUMBER = """function(cell) {
  const v = cell.getValue();
  if (v === null || v === undefined) return '';
  if (typeof v !== 'number') {
    const map = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'};
    return String(v).replace(/[&<>"']/g, (c) => map[c]);
  }
  if (Number.isNaN(v)) return 'NaN';
  if (!Number.isFinite(v)) return v > 0 ? 'inf' : '-inf';
  if (v === 0) return '0';
  const parts = v.toExponential(5).split('e');
  const x = parseInt(parts[1], 10);
  if (x < -4 || x >= 6) {
    const ax = Math.abs(x);
    const mant = parts[0].replace(/\\.?0+$/, '');
    return mant + 'e' + (x < 0 ? '-' : '+') + (ax < 10 ? '0' + ax : String(ax));
  }
  return String(Number(v.toPrecision(6)));
}"""


def _real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def display_number(x: Any) -> Any:
    """``x`` as a table holds it: an int when integral and below 1e6, else a float rounded to
    6 significant digits; anything that is not a real number (bool, text) unchanged."""
    if not _real(x):
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    f = float(x)
    if not math.isfinite(f):
        return f
    if f.is_integer() and abs(f) < SCI_FROM:
        return int(f)
    return float(f"{f:.{DIGITS}g}")


def fmt_number(x: Any) -> str:
    """A number as text: ``6``, ``0.00021``, ``1e-08``, ``1.5e+12``, ``NaN``, ``-inf``;
    integers digit by digit (``1500000000000``)."""
    if not _real(x):
        return str(x)
    if isinstance(x, numbers.Integral):
        return str(int(x))
    f = float(x)
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return f"{f:.{DIGITS}g}"


def fmt_int(n: int) -> str:
    """An integer with thousands separators: ``6,099``."""
    return f"{int(n):,}"


def fmt_count(n: int) -> str:
    """A large count, short: ``1.23M``, ``4.5k``, ``999``."""
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return str(int(n))


def fmt_bytes(n: float) -> str:
    """A byte size in binary units, said as such, 3 significant digits: ``252 MiB``,
    ``74.5 GiB``, ``12 B`` (:func:`ckpt_explorer.readable.human_bytes`)."""
    return human_bytes(n, 3)


def fmt_size_typed(text: str, n: int) -> str:
    """A size the user typed, in the unit typed, with its binary equivalent when the unit was
    decimal: ``"80GB"`` -> ``80 GB (74.5 GiB)``, ``"80GiB"`` -> ``80 GiB``."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)(i?)B?\s*", text, re.IGNORECASE)
    if not m:
        return fmt_bytes(n)
    unit = m.group(2).upper()
    if m.group(3) or not unit:
        return f"{m.group(1)} {unit}{'iB' if unit else 'B'}"
    return f"{m.group(1)} {unit}B ({fmt_bytes(n)})"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 pair``, ``2 pairs``, ``0 errors``, ``1,024 elements`` (``many``: an irregular plural)."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def _inner(v: Any) -> str:
    if isinstance(v, str):
        return '"' + v.replace('"', '\\"') + '"'
    return fmt_value(v, limit=0)


def fmt_value(v: Any, limit: int = MAX_TEXT) -> str:
    """Any plain value as one line of JSON-like text: numbers by :func:`fmt_number`, ``true``
    / ``false`` / ``null``, lists and tuples as ``[…]``, dicts as ``{"k": v}``; text as it is;
    cut to ``limit`` characters (0: no limit)."""
    if isinstance(v, str):
        text = v if v else '""'
    elif isinstance(v, bool):
        text = "true" if v else "false"
    elif v is None:
        text = "null"
    elif _real(v):
        text = fmt_number(v)
    elif isinstance(v, list | tuple):
        text = "[" + ", ".join(_inner(x) for x in v) + "]"
    elif isinstance(v, dict):
        text = "{" + ", ".join(f"{_inner(str(k))}: {_inner(x)}" for k, x in v.items()) + "}"
    else:
        text = str(v)
    return text if not limit or len(text) <= limit else text[: limit - 3] + "..."


def _cell(x: Any) -> Any:
    if x is None or isinstance(x, str):
        return x
    if isinstance(x, bool):
        return fmt_value(x)
    if _real(x):
        return display_number(x)
    return fmt_value(x)


def display_frame(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` as a table shows it: a float column of whole numbers below 1e6
    becomes an integer column, other floats round to 6 digits (still numbers), booleans,
    lists, dicts and objects become :func:`fmt_value` text; text and missing cells unchanged."""
    import pandas as pd

    out = df.copy()
    for col in out.columns:
        s = out[col]
        if s.dtype.kind == "f":
            if s.notna().all() and all(x.is_integer() and abs(x) < SCI_FROM for x in s):
                out[col] = s.astype("int64")
            else:
                out[col] = s.map(display_number)
        elif s.dtype.kind == "b":
            out[col] = s.map(fmt_value)
        elif s.dtype == object:  # not pandas' str dtype: text columns are left alone
            # built by hand: Series.map would turn None into NaN
            out[col] = pd.Series([_cell(x) for x in s], index=s.index, dtype=object)
    return out


def number_columns(df: pd.DataFrame) -> list[str]:
    """Columns that :data:`JS_NUMBER` draws: floats, and object columns holding numbers."""
    cols = []
    for col in df.columns:
        s = df[col]
        if s.dtype.kind == "f" or (s.dtype == object and any(_real(x) for x in s)):
            cols.append(str(col))
    return cols
