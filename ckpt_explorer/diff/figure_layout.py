"""The diff figures' one declaration: the partial sums each chunk pair yields and the figures
derived from them, read by the compiled kernels (their source is written from here at run time
by :mod:`.pair_source`), the torch path (:class:`.stats.ChunkStats`), the merge across chunks
(:class:`.stats.Sums`), the report's rows (:class:`.rows.TensorDiff`) and its tables.

A partial is a float64 sum (``sum``), an integer count (``count``) or a maximum (``max``) over
the positions finite on both sides. ``term`` is its contribution of one such position, a
Python expression of ``x`` and ``y`` (the two values, float64), ``d = y - x``, ``ad = |d|``,
``atol``, ``rtol``, compiled into the kernels; ``torch`` computes the same over a whole chunk
(:class:`Chunk`: the finite values, ``D`` signed until every ``signed`` partial is done, then
``|D|``). ``mismatch``: a position non-finite on a side, whose two values are not the same
(NaN with NaN is), counts too. Partials without a term are the kernels' own bookkeeping (NaN
and Inf counts, finite positions). ``identical`` says which value partial of
:func:`.kernel.value_partials` a chunk whose two sides hold the same bytes takes (None: 0).

To add a figure: one :class:`Figure` in ``FIGURES``, holding its own :class:`Partial` when it
needs a new sum (``partial``). Nothing else: the kernels follow the layout, the row keeps a
figure without a typed field in ``TensorDiff.more_figures`` and emits it among the others
(``--json``, frames, CSV), and a figure with a ``column`` shows in the CLI's table and the
dashboard's Compare table.

``FUSED_PARTIALS`` are summed in one fused loop of the compiled fast kernel; a figure's own
partial gets a loop of its own over the same block (still in cache). The fast loops let LLVM
reassociate sums into vector lanes, and how it splits a loop into lanes depends on everything
that loop accumulates: a new sum in the fused loop would change the last bits of the others.
In a loop of its own it changes nothing of what the report showed before.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass
class Chunk:
    """One chunk pair on the torch path: finite float64 values (non-finite positions zeroed),
    ``D`` = B - A (``|D|`` for partials that are not ``signed``), ``S`` = A + B, the dot products
    ‖A‖² and ‖B‖², the tolerances."""

    A: torch.Tensor
    B: torch.Tensor
    D: torch.Tensor
    S: torch.Tensor
    aa: torch.Tensor
    bb: torch.Tensor
    atol: float
    rtol: float


@dataclass(frozen=True)
class Partial:
    name: str
    merge: str  # "sum", "count" or "max"
    term: str | None = None
    torch: Callable[[Chunk], torch.Tensor] | None = None
    signed: bool = False  # the torch term needs the signed D
    mismatch: bool = False
    identical: str | None = None


def _dot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.dot(x, y)


def _outside(c: Chunk) -> torch.Tensor:
    import torch

    if c.atol == 0.0 and c.rtol == 0.0:
        return torch.count_nonzero(c.D).to(torch.float64)
    thr = c.A.abs().mul_(c.rtol).add_(c.atol)
    return torch.gt(c.D, thr).sum(dtype=torch.float64)


def _nonzero(c: Chunk) -> torch.Tensor:
    import torch

    return torch.count_nonzero(c.D).to(torch.float64)


# the partials of the compiled fast kernel's fused loop (fixed: a new figure's sum stands in
# its own entry, see above)
FUSED_PARTIALS: tuple[Partial, ...] = (
    Partial("max_abs", "max", "ad", lambda c: c.D.max()),
    Partial("sum_abs", "sum", "ad", lambda c: c.D.sum()),
    Partial("aa", "sum", "x * x", lambda c: c.aa, identical="sq"),
    Partial("bb", "sum", "y * y", lambda c: c.bb, identical="sq"),
    Partial("ab", "sum", "x * y", lambda c: _dot(c.A, c.B), identical="sq"),
    Partial("dd", "sum", "d * d", lambda c: _dot(c.D, c.D), signed=True),
    Partial("outside", "count", "ad > atol + rtol * abs(x)", _outside, mismatch=True),
    Partial("nan_a", "count", identical="nan"),
    Partial("nan_b", "count", identical="nan"),
    Partial("inf_a", "count", identical="inf"),
    Partial("inf_b", "count", identical="inf"),
    Partial("count", "count", identical="finite"),
    Partial("ds", "sum", "d * (x + y)", lambda c: _dot(c.D, c.S), signed=True),
    Partial("differ", "count", "d != 0.0", _nonzero, mismatch=True),
)
# the kernels' bookkeeping: a partial without a term is one of these
BOOKKEEPING = ("nan_a", "nan_b", "inf_a", "inf_b", "count")


def general(x: Any) -> str:
    """A figure in the CLI's table: 3 significant digits, ``-`` when undefined."""
    return "-" if x is None else f"{x:.3g}"


def whole(x: Any) -> str:
    """A count in the CLI's table."""
    return "-" if x is None else str(x)


def fmt_one_minus_cos(x: float | None) -> str:
    """1 - cos in scientific notation (``1.2e-08``; ``0`` when parallel): one step apart cos
    is 1 - 1e-8, which a fixed number of digits would print as 1.0000."""
    if x is None:
        return "-"
    return "0" if x == 0 else f"{x:.2g}" if x >= 1e-3 else f"{x:.1e}"


@dataclass(frozen=True)
class Column:
    """A figure shown as a column of the tables of differing tensors (the CLI's and the
    dashboard's Compare table), the columns in ``rank`` order: ``header`` heads it in the CLI,
    which writes each value with ``text`` (the dashboard shows the value, headed by the
    figure's name)."""

    rank: int
    header: str
    text: Callable[[Any], str] = general


@dataclass(frozen=True)
class Figure:
    """One figure of a tensor pair: ``derive`` from the merged partials (by name), its value
    for a pair whose bytes are identical (no float work is done for one), its table column if
    any, and the partial sum it alone reads if any."""

    name: str
    derive: Callable[[dict[str, Any]], Any]
    identical: Any = None
    doc: str = ""
    column: Column | None = None
    partial: Partial | None = None  # a sum only this figure reads


def _norms(s: dict[str, Any]) -> tuple[float, float, float]:
    return math.sqrt(s["aa"]), math.sqrt(s["bb"]), math.sqrt(s["dd"])


def _rel_l2(s: dict[str, Any]) -> float | None:
    norm_a, _, diff = _norms(s)
    if norm_a > 0:
        return diff / norm_a
    return 0.0 if diff == 0 else None


def _cosine(s: dict[str, Any]) -> float | None:
    norm_a, norm_b, _ = _norms(s)
    if not (norm_a > 0 and norm_b > 0):
        return None
    return max(-1.0, min(1.0, s["ab"] / (norm_a * norm_b)))


def _one_minus_cos(s: dict[str, Any]) -> float | None:
    """1 - cos(a, b) without cancellation: ||a-b||² = (||a|| - ||b||)² + 2||a|| ||b||(1 - cos),
    with ||a|| - ||b|| = Σ(b-a)(a+b) / (||a|| + ||b||) from the differences themselves."""
    norm_a, norm_b, _ = _norms(s)
    if not (norm_a > 0 and norm_b > 0):
        return None
    gap = s["ds"] / (norm_a + norm_b)
    return max(0.0, min(2.0, (s["dd"] - gap * gap) / (2.0 * norm_a * norm_b)))


FIGURES: tuple[Figure, ...] = (
    Figure("max_abs", lambda s: s["max_abs"], 0.0, "max |b - a|", Column(1, "max|a-b|")),
    Figure(
        "mean_abs", lambda s: s["sum_abs"] / s["count"] if s["count"] else 0.0, 0.0, "mean |b - a|"
    ),
    Figure("rel_l2", _rel_l2, 0.0, "||b - a|| / ||a||", Column(0, "rel_l2")),
    Figure("cosine", _cosine, None, "cos(a, b)"),
    Figure(
        "one_minus_cos",
        _one_minus_cos,
        None,
        "1 - cos(a, b), without cancellation",
        Column(2, "1−cos", fmt_one_minus_cos),
    ),
    Figure("diff_l2", lambda s: _norms(s)[2], 0.0, "||b - a||"),
    Figure(
        "n_outside",
        lambda s: s["outside"],
        0,
        "elements beyond atol + rtol * |a|",
        Column(3, "outside", whole),
    ),
    Figure("nan_a", lambda s: s["nan_a"], None, "NaN elements of a"),
    Figure("nan_b", lambda s: s["nan_b"], None, "NaN elements of b"),
    Figure("inf_a", lambda s: s["inf_a"], None, "±Inf elements of a"),
    Figure("inf_b", lambda s: s["inf_b"], None, "±Inf elements of b"),
    Figure("norm_a", lambda s: _norms(s)[0], None, "||a|| (finite elements)"),
    Figure("norm_b", lambda s: _norms(s)[1], None, "||b|| (finite elements)"),
    Figure("n_differ", lambda s: s["differ"], 0, "elements whose values differ at all"),
    Figure(
        "n_sign_flips",
        lambda s: s["sign_flips"],
        0,
        "elements whose sign flipped: finite on both sides, one above zero, the other below",
        Column(4, "flips", whole),
        Partial(
            "sign_flips",
            "count",
            "(x > 0.0) & (y < 0.0) | (x < 0.0) & (y > 0.0)",
            lambda c: ((c.A > 0) & (c.B < 0) | (c.A < 0) & (c.B > 0)).sum(),
        ),
    ),
)
FIGURE_NAMES = tuple(f.name for f in FIGURES)
# the figures' own partials, in figure order; every partial, in slot order
OWN_PARTIALS: tuple[Partial, ...] = tuple(f.partial for f in FIGURES if f.partial is not None)
PARTIALS: tuple[Partial, ...] = FUSED_PARTIALS + OWN_PARTIALS
SLOT = {p.name: i for i, p in enumerate(PARTIALS)}
# the figures shown as table columns, in column order
COLUMNS: tuple[Figure, ...] = tuple(
    sorted((f for f in FIGURES if f.column), key=lambda f: f.column.rank if f.column else 0)
)
assert {p.name for p in PARTIALS if p.term is None} == set(BOOKKEEPING)
assert len(SLOT) == len(PARTIALS) and len(set(FIGURE_NAMES)) == len(FIGURES)
