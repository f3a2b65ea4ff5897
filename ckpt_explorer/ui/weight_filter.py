"""The weight map's name and file filters over precomputed columns, so typing stays cheap.

Same rows as :func:`~ckpt_explorer.ui.tables.filter_weights` (substring, case-insensitive;
or, for a module of the tree, its exact prefix), computed over lower-cased columns made once
per checkpoint, with the last queries' rows kept: a page change or a sort re-filters nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from .tables import ARROW

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

KEEP = 16  # queries whose rows are kept


class WeightFilter:
    """Rows of one weight-map frame for ``(name, file, prefix)`` queries.

    Example:
        >>> f = WeightFilter(weights)                               # doctest: +SKIP
        >>> f(weights, "model.layers.2.", prefix=True)["name"][:2]  # doctest: +SKIP
    """

    def __init__(self, frame: pd.DataFrame, module_rows: Any = None) -> None:
        self.frame = frame
        self._name = frame["name"]
        self._key = frame["key"]
        self._low_name = frame["name"].str.lower()
        self._low_key = frame["key"].str.lower()
        self._low_file = frame["file"].str.lower()
        self._same = bool((frame["name"] == frame["key"]).all())  # no optimizer state folded
        self._module_rows = module_rows  # filter -> row positions, from the module tree
        self._kept: OrderedDict[tuple[str, str, bool], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def rows(self, name: str = "", file: str = "", prefix: bool = False) -> np.ndarray:
        """Positions of the rows the query shows, in frame order."""
        q = (name, file, prefix)
        with self._lock:
            hit = self._kept.get(q)
            if hit is not None:
                self._kept.move_to_end(q)
                return hit
        out = self._compute(name, file, prefix)
        with self._lock:
            self._kept[q] = out
            while len(self._kept) > KEEP:
                self._kept.popitem(last=False)
        return out

    def _compute(self, name: str, file: str, prefix: bool) -> np.ndarray:
        import numpy as np

        mask = None
        if name:
            # a tree node's rows are the keys under it: the same rows when names are keys
            tree = prefix and self._same and self._module_rows is not None
            known = self._module_rows(name) if tree else None
            if known is not None:
                mask = np.zeros(len(self.frame), dtype=bool)
                mask[known] = True
            elif prefix and name.endswith((".", "/", ARROW)):
                mask = self._either(lambda s: s.str.startswith(name), self._name, self._key)
            elif prefix:
                mask = self._either(lambda s: s == name, self._name, self._key)
            else:
                low = name.lower()
                mask = self._either(
                    lambda s: s.str.contains(low, regex=False), self._low_name, self._low_key
                )
        if file:
            fm = self._low_file.str.contains(file.lower(), regex=False).to_numpy()
            mask = fm if mask is None else mask & fm
        if mask is None:
            return np.arange(len(self.frame))
        return np.flatnonzero(mask)

    def _either(self, test: Any, a: pd.Series, b: pd.Series) -> np.ndarray:
        hit = test(a).to_numpy(dtype=bool)
        return hit if self._same else hit | test(b).to_numpy(dtype=bool)

    def __call__(
        self, df: pd.DataFrame | None, name: str = "", file: str = "", prefix: bool = False
    ) -> pd.DataFrame | None:
        """``df`` (this filter's frame) narrowed to the query's rows, for a table's filter."""
        if df is None or df is not self.frame:
            from .tables import filter_weights

            return filter_weights(df, name, file, prefix)
        if not name and not file:
            return df
        return df.iloc[self.rows(name, file, prefix)]
