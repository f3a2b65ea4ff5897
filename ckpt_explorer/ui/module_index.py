"""The module tree of a weight map, opened one level at a time (never 100k nodes at once).

Keys (:func:`~ckpt_explorer.ui.tables.tensor_key`: names, optimizer states folded under their
parameter) are split at ``.``, ``/`` and `` → ``. A node is named by its *filter*: the key's
prefix up to and including the separator after it (``model.layers.2.``), so it matches that
module only, never ``model.layers.20``; a tensor's node is its whole key. Children are listed
in natural order (``layers.2`` before ``layers.10``) with their tensors, elements, bytes and
dtypes, computed when a node is first opened from the rows under it.

Example:
    >>> index = ModuleIndex(weights)                      # doctest: +SKIP
    >>> [n.label for n in index.children("")]             # doctest: +SKIP
    ['model', 'lm_head.weight']
    >>> index.children("model.layers.")[2].filter         # doctest: +SKIP
    'model.layers.2.'
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..natural import natural_text_key

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

SPLIT = re.compile(r"[./]| → ")
MAX_CHILDREN = 1000  # children listed per request (the rest on "more")


@dataclass(frozen=True)
class ModuleNode:
    """One node of the tree.

    Attributes:
        filter: what the weight map filters on for it: a module's prefix with its separator
            (``model.layers.2.``), or a tensor's whole key.
        label: its own part of the name (``2``, ``mlp``, ``exp_avg``).
        tensors, numel, nbytes: totals over the tensors under it.
        dtypes: dtype -> tensors under it, most bytes first.
        tensor: the tensor's name when the node is one tensor ("" for a module).
        shape: the tensor's shape ("" for a module).
        has_children: whether it opens.
    """

    filter: str
    label: str
    tensors: int
    numel: int
    nbytes: int
    dtypes: tuple[tuple[str, int], ...]
    tensor: str = ""
    shape: str = ""
    has_children: bool = False


class ModuleIndex:
    """Children of any node on demand, from a weight-map frame (``name``, ``key``, ``dtype``,
    ``shape``, ``numel``, ``bytes`` columns); each level is computed once and kept."""

    def __init__(self, frame: pd.DataFrame) -> None:
        import numpy as np

        self._keys: list[str] = list(frame["key"])
        self._names: list[str] = list(frame["name"])
        self._shapes: list[str] = list(frame["shape"])
        self._numel = frame["numel"].to_numpy(dtype=np.int64)
        self._bytes = frame["bytes"].to_numpy(dtype=np.int64)
        codes, uniques = _factorize(list(frame["dtype"]))
        self._dtype = codes
        self._dtype_names = uniques
        self._rows: dict[str, np.ndarray] = {"": np.arange(len(self._keys))}
        self._children: dict[str, list[ModuleNode]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._keys)

    def rows(self, node: str) -> np.ndarray | None:
        """Row positions under ``node`` (a filter) once its parent was opened, else None."""
        return self._rows.get(node)

    def children(self, node: str = "") -> list[ModuleNode]:
        """The children of ``node`` ("" for the root), in natural order of their labels."""
        with self._lock:
            if node not in self._children:
                rows = self._rows.get(node)
                if rows is None:
                    for parent in ancestors(node):  # open the way down first
                        self._open(parent)
                    rows = self._rows.get(node)
                self._children[node] = self._open(node) if rows is not None else []
            return self._children[node]

    def _open(self, node: str) -> list[ModuleNode]:
        import numpy as np

        if node in self._children:
            return self._children[node]
        rows = self._rows[node]
        start = len(node)
        keys = self._keys
        groups: dict[str, list[int]] = {}
        leaf_of: dict[str, int] = {}
        for pos in rows.tolist():
            key = keys[pos]
            m = SPLIT.search(key, start)
            if m is None:
                groups.setdefault(key, []).append(pos)
                leaf_of[key] = pos
            else:
                groups.setdefault(key[: m.end()], []).append(pos)
        out = []
        for filt, members in groups.items():
            idx = np.asarray(members, dtype=np.int64)
            self._rows[filt] = idx
            leaf = leaf_of.get(filt)
            label = SPLIT.sub("", filt[start:]) if leaf is None else filt[start:]
            out.append(
                ModuleNode(
                    filter=filt,
                    label=label or filt[start:],
                    tensors=len(members),
                    numel=int(self._numel[idx].sum()),
                    nbytes=int(self._bytes[idx].sum()),
                    dtypes=self._dtype_counts(idx),
                    tensor=self._names[leaf] if leaf is not None else "",
                    shape=self._shapes[leaf] if leaf is not None else "",
                    has_children=leaf is None,
                )
            )
        out.sort(key=lambda n: (natural_text_key(n.label), n.has_children))
        self._children[node] = out
        return out

    def _dtype_counts(self, idx: np.ndarray) -> tuple[tuple[str, int], ...]:
        import numpy as np

        counts = np.bincount(self._dtype[idx], minlength=len(self._dtype_names))
        weight = np.bincount(self._dtype[idx], self._bytes[idx], len(self._dtype_names))
        order = sorted(np.flatnonzero(counts).tolist(), key=lambda i: -weight[i])
        return tuple((self._dtype_names[i], int(counts[i])) for i in order)


def ancestors(node: str) -> list[str]:
    """The filters of the nodes above ``node``, from the root: ``model.layers.2.`` ->
    ``["", "model.", "model.layers."]``."""
    out = [""]
    for m in SPLIT.finditer(node):
        if m.end() < len(node):
            out.append(node[: m.end()])
    return out


def _factorize(values: list[str]) -> tuple[Any, list[str]]:
    import numpy as np

    seen: dict[str, int] = {}
    codes = np.fromiter((seen.setdefault(v, len(seen)) for v in values), np.int64, len(values))
    return codes, list(seen)
