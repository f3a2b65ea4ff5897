"""Export: a table's rows as CSV or JSON, as the table shows them (filters and sort applied)."""

from __future__ import annotations

import io
import json
import math
from typing import Any

import panel as pn


def _rows(tbl: pn.widgets.Tabulator) -> Any:
    df = tbl.current_view if tbl.value is not None else None
    if df is None:
        import pandas as pd

        return pd.DataFrame()
    return df


def _plain(x: Any) -> Any:
    """A cell as JSON holds it: NaN/inf as text (JSON has no NaN), numpy scalars as Python."""
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def table_csv(tbl: pn.widgets.Tabulator) -> io.StringIO:
    """The rows shown (every page) as CSV text."""
    return io.StringIO(_rows(tbl).to_csv(index=False))


def table_json(tbl: pn.widgets.Tabulator) -> io.StringIO:
    """The rows shown (every page) as a JSON list of objects (full precision)."""
    df = _rows(tbl)
    records = [{str(k): _plain(v) for k, v in row.items()} for row in df.to_dict("records")]
    return io.StringIO(json.dumps(records, indent=1) + "\n")


def export_buttons(tbl: pn.widgets.Tabulator, name: str) -> pn.Row:
    """CSV and JSON download buttons for ``tbl`` (files ``<name>.csv`` / ``<name>.json``)."""
    csv = pn.widgets.FileDownload(
        callback=lambda: table_csv(tbl),
        filename=f"{name}.csv",
        label="CSV",
        button_type="light",
        width=70,
        embed=False,
    )
    js = pn.widgets.FileDownload(
        callback=lambda: table_json(tbl),
        filename=f"{name}.json",
        label="JSON",
        button_type="light",
        width=70,
        embed=False,
    )
    return pn.Row(csv, js, align="end", css_classes=["export"])
