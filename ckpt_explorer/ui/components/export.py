"""Export: a table's rows as CSV or JSON, the rows the table shows (filters and sort applied)
with the values it was given, typed so that they read back as they are: shapes as lists
(``[64, 128]``, ``[]`` for a scalar), whole numbers as integers (a layer is ``0``, not
``0.0``; missing is empty / ``null``), every float at full precision. Files are named after
what they hold and the checkpoints they are of (``tensors-run_step-6000.csv``).
"""

from __future__ import annotations

import io
import json
import math
import re
from typing import Any

import panel as pn

from ..tables import shape_of_text

SHAPE_COLUMNS = ("shape", "shape_a", "shape_b")
MAX_INT = 2**53  # whole floats up to here are exact integers


def _rows(tbl: pn.widgets.Tabulator) -> Any:
    """The rows shown, every page, with the values the table was given (not its display)."""
    import pandas as pd

    if tbl.value is None:
        return pd.DataFrame()
    shown = tbl.current_view
    source = getattr(tbl, "typed_source", None)
    if source is not None and getattr(tbl, "typed_for", None) is tbl.value:
        return source.loc[shown.index]
    return shown


def typed_frame(df: Any) -> Any:
    """``df`` as exported: shape columns as lists of ints, float columns of whole numbers as
    (nullable) integers; everything else as it is."""
    import pandas as pd

    out = df.copy()
    for col in out.columns:
        s = out[col]
        if col in SHAPE_COLUMNS and any(isinstance(x, str) for x in s):
            out[col] = pd.Series(
                [shape_of_text(x) if isinstance(x, str) else x for x in s],
                index=s.index,
                dtype=object,
            )
        elif s.dtype.kind == "f":
            present = s.dropna()
            if len(present) and all(
                math.isfinite(x) and float(x).is_integer() and abs(x) < MAX_INT for x in present
            ):
                out[col] = s.astype("Int64")
    return out


def _plain(x: Any) -> Any:
    """A cell as JSON holds it: missing as null, NaN/inf as text (JSON has neither), numpy
    scalars as Python numbers."""
    import pandas as pd

    if x is None or x is pd.NA:
        return None
    if hasattr(x, "item") and not isinstance(x, list | tuple | dict):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def _csv_cell(x: Any) -> Any:
    return json.dumps(x) if isinstance(x, list | tuple | dict) else x


def table_csv(tbl: pn.widgets.Tabulator) -> io.StringIO:
    """The rows shown (every page) as CSV: lists as JSON (``[64, 128]``), full precision."""
    df = typed_frame(_rows(tbl))
    for col in df.columns:
        if df[col].dtype == object:
            df[col] = df[col].map(_csv_cell)
    return io.StringIO(df.to_csv(index=False))


def table_json(tbl: pn.widgets.Tabulator) -> io.StringIO:
    """The rows shown (every page) as a JSON list of objects (full precision)."""
    df = typed_frame(_rows(tbl))
    records = [
        {str(k): _plain(v) for k, v in zip(df.columns, row, strict=True)}
        for row in df.itertuples(index=False, name=None)
    ]
    return io.StringIO(json.dumps(records, indent=1) + "\n")


def slug(path: str) -> str:
    """A checkpoint's path as part of a file name: ``run/step-6000`` -> ``run_step-6000``."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "_", path.split("://")[-1]).strip("._")
    return text[-60:] or "checkpoint"


def export_name(what: str, *paths: str) -> str:
    """``tensors-run_step-6000``; two checkpoints: ``compare-a-vs-b``."""
    named = [slug(p) for p in paths if p]
    return f"{what}-{'-vs-'.join(named)}" if named else what


def name_exports(row: pn.Row, name: str) -> None:
    """Name the files of :func:`export_buttons`' row ``<name>.csv`` / ``<name>.json``.

    The buttons are replaced, not renamed: Panel's FileDownload view sets its link's
    ``download`` on a filename change, and throws when its link is not drawn yet (a tab not
    shown)."""
    if [b.filename for b in row.objects] == [f"{name}.csv", f"{name}.json"]:
        return
    row.objects = [
        _button(b.callback, f"{name}{'.csv' if b.label == 'CSV' else '.json'}", b.label)
        for b in row.objects
    ]


def _button(callback: Any, filename: str, label: str) -> pn.widgets.FileDownload:
    return pn.widgets.FileDownload(
        callback=callback,
        filename=filename,
        label=label,
        color="light",
        width=84,  # "JSON" and the download icon, never clipped
        embed=False,
    )


def export_buttons(tbl: pn.widgets.Tabulator, name: str) -> pn.Row:
    """CSV and JSON download buttons for ``tbl`` (files ``<name>.csv`` / ``<name>.json``)."""
    return pn.Row(
        _button(lambda: table_csv(tbl), f"{name}.csv", "CSV"),
        _button(lambda: table_json(tbl), f"{name}.json", "JSON"),
        align="end",
        css_classes=["export"],
    )
