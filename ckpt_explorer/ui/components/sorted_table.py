"""The dashboard's table: names sorted in natural order, on the server and in the browser.

A server-paged table (``pagination="remote"``: 100k rows stay on the server) sorts on the
server: text columns by :func:`~ckpt_explorer.natural.natural_text_key` (``layers.2`` before
``layers.10``), numbers by value, missing values last either way, ties in row order. Each
column's ranks are computed once per table value, so a click on a header or a page change
costs one ``lexsort`` over the rows shown, not a sort of strings. Tables paged in the browser
get Tabulator's own natural sorter (``alphanum``) on their text columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import panel as pn

from ...natural import natural_text_key

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


def text_columns(df: pd.DataFrame) -> list[str]:
    """Columns holding text (``str`` or object dtype with strings)."""
    out = []
    for col in df.columns:
        s = df[col]
        textual = s.dtype.kind in "OSUT" or str(s.dtype) in ("str", "string")
        if textual and any(isinstance(x, str) for x in s.head(50)):
            out.append(str(col))
    return out


def column_ranks(s: pd.Series) -> np.ndarray:
    """Each row's position in ascending order of ``s`` (natural for text, by value for
    numbers); missing values get the largest ranks."""
    import numpy as np
    import pandas as pd

    n = len(s)
    missing = s.isna().to_numpy()
    values = s.to_numpy()
    present = np.flatnonzero(~missing)
    if s.dtype.kind in "iufb":
        order = present[np.argsort(values[present], kind="stable")]
    else:
        if all(isinstance(values[i], int | float) for i in present[:50].tolist()):
            keyed = pd.to_numeric(pd.Series(values[present]), errors="coerce").to_numpy()
            order = present[np.argsort(keyed, kind="stable")]
        else:
            texts = [natural_text_key(str(values[i]).lower()) for i in present.tolist()]
            by = sorted(range(len(texts)), key=texts.__getitem__)
            order = present[np.asarray(by, dtype=np.int64)] if by else present
    ranks = np.empty(n, dtype=np.int64)
    ranks[order] = np.arange(len(order))
    ranks[np.flatnonzero(missing)] = n  # last, and equal: ties keep row order
    return ranks


class Table(pn.widgets.Tabulator):  # type: ignore[misc]
    """Tabulator whose server-side sort is natural for text (see the module docstring)."""

    typed_source: Any = None  # the frame given, before display rounding (exports write it)
    typed_for: Any = None  # the value it belongs to (a new value makes it stale)

    def __init__(self, value: Any = None, **params: Any) -> None:
        self._ranks: dict[str, Any] = {}
        self._ranked: Any = None
        super().__init__(value, **params)

    def _get_properties(self, doc: Any = None) -> dict[str, Any]:
        """Panel's properties, with a selection made before the table is drawn given as rows
        of the page shown (Panel gives the rows of the whole table, which a page past the
        first then shows on the wrong row or not at all)."""
        props: dict[str, Any] = super()._get_properties(doc)
        if self.pagination == "remote" and self.selection and self.value is not None:
            size = self.page_size or self.initial_page_size
            start = (self.page - 1) * size
            shown = self._processed.index[start : start + size]  # type: ignore[union-attr]
            labels = self.value.index[self.selection]
            props["source"].selected.indices = [int(shown.get_loc(x)) for x in labels if x in shown]
        return props

    def _rank(self, field: str) -> np.ndarray:
        if self._ranked is not self.value:
            self._ranks, self._ranked = {}, self.value
        if field not in self._ranks:
            self._ranks[field] = column_ranks(self.value[field])
        return self._ranks[field]  # type: ignore[no-any-return]

    def _sort_df(self, df: pd.DataFrame) -> pd.DataFrame:
        import numpy as np
        import pandas as pd

        if not self.sorters or df is None or not len(df) or self.value is None:
            return df
        fields = [self._renamed_cols.get(s["field"], s["field"]) for s in self.sorters]
        if any(f not in self.value.columns for f in fields):
            return super()._sort_df(df)  # the index or a renamed column: Panel's own sort
        index = self.value.index
        if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
            rows = df.index.to_numpy()
        else:
            rows = index.get_indexer(df.index)
        keys = [np.arange(len(df))]  # np.lexsort: the last key is the first sorter
        for s, field in reversed(list(zip(self.sorters, fields, strict=True))):
            r = self._rank(field)[rows]
            keys.append(r if s["dir"] == "asc" else np.where(r == len(index), r, -r))
        return df.iloc[np.lexsort(keys)]


def browser_sorters(df: pd.DataFrame | None) -> list[dict[str, Any]]:
    """Tabulator column settings that sort the text columns of ``df`` naturally in the
    browser (tables paged there)."""
    if df is None:
        return []
    return [{"field": c, "sorter": "alphanum"} for c in text_columns(df)]
