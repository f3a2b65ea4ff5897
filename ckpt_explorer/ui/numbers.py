"""Numbers for people: the one display rule every dashboard table goes through.

Integers (and integral floats such as a step saved as ``6.0``) show as integers; other floats
as the shortest text that round-trips at 6 significant digits (``0.00020999999999999998`` ->
``0.00021``). Numeric columns stay numbers (rounded), so tables still sort by value; mixed or
text columns get the same rule as text.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

DIGITS = 6
MAX_EXACT_INT = 2**53  # integral floats beyond this are not shown digit by digit
MAX_TEXT = 160


def display_number(x: Any) -> Any:
    """``x`` as shown: an int when integral, a float rounded to 6 significant digits; anything
    that is not a real number (bool, NaN, inf, text) unchanged."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    f = float(x)
    if not math.isfinite(f):
        return f
    if f.is_integer() and abs(f) < MAX_EXACT_INT:
        return int(f)
    return float(f"{f:.{DIGITS}g}")


def fmt_number(x: Any) -> str:
    """``display_number`` as text: ``6``, ``0.00021``, ``1.2e-08``, ``nan``."""
    v = display_number(x)
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and v.is_integer() and abs(v) < MAX_EXACT_INT:
        return str(int(v))  # 123456.7 -> 123457, as a table's number cell shows it
    return f"{v:.{DIGITS}g}" if isinstance(v, float) else str(v)


def _inner(v: Any) -> str:
    return repr(v) if isinstance(v, str) else fmt_value(v, limit=0)


def fmt_value(v: Any, limit: int = MAX_TEXT) -> str:
    """Any plain value (numbers, text, lists, tuples, dicts, None) as one line of text, numbers
    by :func:`fmt_number`; cut to ``limit`` characters (0: no limit)."""
    if isinstance(v, str):
        text = v if v else "''"
    elif isinstance(v, bool) or v is None:
        text = str(v)
    elif isinstance(v, numbers.Real):
        text = fmt_number(v)
    elif isinstance(v, list):
        text = "[" + ", ".join(_inner(x) for x in v) + "]"
    elif isinstance(v, tuple):
        text = "(" + ", ".join(_inner(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    elif isinstance(v, dict):
        text = "{" + ", ".join(f"{_inner(k)}: {_inner(x)}" for k, x in v.items()) + "}"
    else:
        text = repr(v)
    return text if not limit or len(text) <= limit else text[: limit - 3] + "..."


def _cell(x: Any) -> Any:
    if x is None or isinstance(x, str | bool):
        return x
    if isinstance(x, numbers.Real):
        return display_number(x)
    return fmt_value(x)


def display_frame(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` as a table shows it: numbers by :func:`display_number` (a float column
    of whole numbers becomes an integer column), lists/dicts/objects as :func:`fmt_value` text;
    text and missing cells unchanged."""
    import pandas as pd

    out = df.copy()
    for col in out.columns:
        s = out[col]
        if s.dtype.kind == "f":
            if s.notna().all() and all(x.is_integer() and abs(x) < MAX_EXACT_INT for x in s):
                out[col] = s.astype("int64")
            else:
                out[col] = s.map(display_number)
        elif s.dtype == object:  # not pandas' str dtype: text columns are left alone
            # built by hand: Series.map would turn None into NaN
            out[col] = pd.Series([_cell(x) for x in s], index=s.index, dtype=object)
    return out
