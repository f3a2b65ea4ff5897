"""The rows of a diff report: one per tensor name, one per value."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..types import Slot
from .figure_layout import FIGURE_NAMES

# status of a tensor row
IDENTICAL = "identical"  # the same bytes
EQUAL = "equal"  # every element within atol + rtol*|a| (bytes differ)
CHANGED = "changed"
SHAPE_MISMATCH = "shape_mismatch"
DTYPE_MISMATCH = "dtype_mismatch"  # figures are still computed when the shapes agree
ONLY_IN_A = "only_in_a"
ONLY_IN_B = "only_in_b"
NOT_COMPARED = "not_compared"  # the run was cancelled before this pair
STATUSES = (
    IDENTICAL,
    EQUAL,
    CHANGED,
    SHAPE_MISMATCH,
    DTYPE_MISMATCH,
    ONLY_IN_A,
    ONLY_IN_B,
    NOT_COMPARED,
)
SAME = (IDENTICAL, EQUAL)

LAYER_RE = re.compile(r"(?:^|\.)(\d+)\.")


@dataclass
class TensorDiff:
    """One aligned tensor name and its figures (None where not computed or undefined): the
    figure layout's ``FIGURES`` (diff/figure_layout.py). The figures the report and the UI
    read by name are typed fields here, from ``max_abs`` to ``n_differ``, in the layout's
    order; a figure declared only in the layout is kept in ``more_figures`` and emitted flat
    among them by :meth:`to_dict` (so in ``--json``, the frames, CSV and the tables' columns).
    :meth:`figure` reads either kind, :meth:`set_figures` writes them.

    ``name`` is A's name (B's for a name only in B); ``name_b`` is B's name when alignment
    paired different names. Identical pairs are recognised by their bytes, without float
    work: their ``max_abs``/``mean_abs``/``rel_l2``/``n_outside`` are 0 and the norms,
    cosine and NaN/Inf counts are left None.
    """

    name: str
    status: str
    name_b: str | None = None
    match: str = "exact"
    part: str = ""
    param: str | None = None
    param_b: str | None = None
    state: str | None = None
    module: str = ""
    layer: int | None = None
    dtype_a: str | None = None
    dtype_b: str | None = None
    shape_a: list[int] | None = None
    shape_b: list[int] | None = None
    numel: int = 0
    nbytes_a: int = 0
    nbytes_b: int = 0
    max_abs: float | None = None
    mean_abs: float | None = None
    rel_l2: float | None = None
    cosine: float | None = None
    one_minus_cos: float | None = None  # 1 - cosine, computed without cancellation
    diff_l2: float | None = None
    n_outside: int | None = None
    nan_a: int | None = None
    nan_b: int | None = None
    inf_a: int | None = None
    inf_b: int | None = None
    norm_a: float | None = None
    norm_b: float | None = None
    n_differ: int | None = None  # elements whose values differ at all (any tolerance)
    # an export (GGUF) against its source: the type, what it should cost, the verdict
    # (exact / within_budget / beyond_budget, see diff/quant_budget.py), where the tensor is in
    # the export and what the converter did to it; note: why a tensor could not be paired
    quant: str | None = None
    verdict: str | None = None
    budget: float | None = None
    budget_ratio: float | None = None
    export_tensor: str | None = None
    note: str | None = None
    order: int = field(default=0, repr=False)
    # the layout's figures without a typed field above, by name
    more_figures: dict[str, Any] = field(default_factory=dict, repr=False)

    def figure(self, name: str) -> Any:
        """A figure of the layout by name (None where not computed or undefined)."""
        if name in _TYPED_FIGURES:
            return getattr(self, name)
        return self.more_figures.get(name)

    def set_figures(self, values: Mapping[str, Any]) -> None:
        """Set figures of the layout by name (typed fields, else ``more_figures``)."""
        for name, value in values.items():
            if name in _TYPED_FIGURES:
                setattr(self, name, value)
            else:
                self.more_figures[name] = value

    def to_dict(self) -> dict[str, Any]:
        """The row as plain values: the fields in order, the layout's figures (typed or not)
        in the layout's order where the typed ones stand."""
        out = asdict(self)
        out.pop("order")
        more = out.pop("more_figures")
        if not _UNTYPED_FIGURES:
            return out
        return {k: out[k] if k in out else more.get(k) for k in _KEYS}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TensorDiff:
        more = {k: d[k] for k in _UNTYPED_FIGURES if k in d}
        return cls(**{k: v for k, v in d.items() if k in _FIELDS}, more_figures=more)


_FIELDS = frozenset(f.name for f in fields(TensorDiff)) - {"more_figures"}
_TYPED_FIGURES = frozenset(FIGURE_NAMES) & _FIELDS
_UNTYPED_FIGURES = tuple(n for n in FIGURE_NAMES if n not in _TYPED_FIGURES)


def _keys() -> tuple[str, ...]:
    """:meth:`TensorDiff.to_dict`'s keys: the fields before the typed figures, every figure of
    the layout, the fields after."""
    names = [f.name for f in fields(TensorDiff) if f.name not in ("order", "more_figures")]
    first = next(i for i, n in enumerate(names) if n in _TYPED_FIGURES)
    rest = [n for n in names[first:] if n not in _TYPED_FIGURES]
    return (*names[:first], *FIGURE_NAMES, *rest)


_KEYS = _keys()


@dataclass
class ValueDiff:
    """One non-tensor value (hyperparameter, scheduler field, step, ...) on both sides."""

    key: str
    status: str  # "equal", "changed", "only_in_a", "only_in_b"
    a: Any = None
    b: Any = None
    key_b: str | None = None
    informational: bool = False  # file metadata/config: shown, not part of the verdict

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ValueDiff:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def describe_name(
    name: str, param: str | None, slot: Slot | None = None
) -> tuple[str, str | None, str, int | None]:
    """(part, optimizer state name, module, layer index) of a row name.

    ``slot``: where the view puts the row when it is an optimizer state (``view.slot``);
    such rows use their parameter's name (when known) for module and layer.
    """
    part, sep, rest = name.partition("/")
    if not sep:
        part, rest = "", name
    state = None
    if slot is not None:
        state = slot.state
        if param is None:
            return part, state, f"{slot.optimizer}state.{slot.param_id}", None
        rest = param
        module = param.rsplit(".", 1)[0] if "." in param else param
    else:
        module = rest.rsplit(".", 1)[0] if "." in rest else rest
    lm = LAYER_RE.search(rest)
    return part, state, module, int(lm.group(1)) if lm else None
