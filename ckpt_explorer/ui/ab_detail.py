"""What the A/B tensor view shows: one tensor of A and of B, side by side, on common scales.

Histograms of A and B on the same bins, the histogram of A − B, the first 2-D slice of A, B
and A − B strided down to a heatmap, and the L2 norm of A − B per row and per column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .tensor_stats import HEATMAP_SIDE, sample, slice_2d

if TYPE_CHECKING:
    import torch

BINS = 60


@dataclass
class ABDetail:
    """Figures of one tensor pair.

    Attributes:
        name, name_b: the tensor in A and in B; shape_a, shape_b their shapes.
        edges, counts_a, counts_b: histograms of A and B (finite values) on common bins.
        diff_edges, diff_counts: histogram of A − B (empty when the shapes differ).
        slice_a, slice_b, slice_diff, slice_label: the first 2-D slice (None below 2-D or when
            the shapes differ for the difference); ``zmax`` the one colour scale, ±zmax.
        row_norms, col_norms: L2 norm of A − B per row / column of that slice.
        max_abs: max |A − B| over every element (None when the shapes differ).
    """

    name: str
    name_b: str
    shape_a: tuple[int, ...]
    shape_b: tuple[int, ...]
    edges: list[float] = field(default_factory=list)
    counts_a: list[int] = field(default_factory=list)
    counts_b: list[int] = field(default_factory=list)
    diff_edges: list[float] = field(default_factory=list)
    diff_counts: list[int] = field(default_factory=list)
    slice_a: list[list[float]] | None = None
    slice_b: list[list[float]] | None = None
    slice_diff: list[list[float]] | None = None
    slice_label: str = ""
    zmax: float = 0.0
    row_norms: list[float] = field(default_factory=list)
    col_norms: list[float] = field(default_factory=list)
    max_abs: float | None = None


def _hist(x: torch.Tensor, lo: float, hi: float) -> list[int]:
    import torch

    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return [int(c) for c in torch.histc(x, bins=BINS, min=lo, max=hi).tolist()]


def _edges(lo: float, hi: float) -> list[float]:
    import torch

    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return [float(e) for e in torch.linspace(lo, hi, BINS + 1).tolist()]


def _finite(x: torch.Tensor) -> torch.Tensor:
    import torch

    return x[torch.isfinite(x)]


def ab_detail(name: str, a: torch.Tensor, b: torch.Tensor, name_b: str = "") -> ABDetail:
    """Everything the A/B view shows for ``a`` and ``b`` (any shapes; the difference only
    when they match)."""
    import torch

    d = ABDetail(name, name_b or name, tuple(a.shape), tuple(b.shape))
    xa, xb = _finite(sample(a)), _finite(sample(b))
    both = torch.cat([xa, xb])
    if both.numel():
        lo, hi = float(both.min()), float(both.max())
        d.edges = _edges(lo, hi)
        d.counts_a, d.counts_b = _hist(xa, lo, hi), _hist(xb, lo, hi)
    same = a.shape == b.shape
    if same and a.numel():
        diff = a.to(torch.float64) - b.to(torch.float64)
        fd = _finite(sample(diff))
        if fd.numel():
            lo, hi = float(fd.min()), float(fd.max())
            d.diff_edges, d.diff_counts = _edges(lo, hi), _hist(fd, lo, hi)
        finite = _finite(diff.reshape(-1))
        d.max_abs = float(finite.abs().max()) if finite.numel() else None
    sa, label = slice_2d(a, HEATMAP_SIDE)
    sb, _ = slice_2d(b, HEATMAP_SIDE)
    d.slice_a, d.slice_b, d.slice_label = sa, sb, label
    if same and sa is not None and sb is not None:
        ta, tb = torch.tensor(sa), torch.tensor(sb)
        sd = ta - tb
        d.slice_diff = sd.tolist()
        vals = _finite(torch.cat([ta.reshape(-1), tb.reshape(-1), sd.reshape(-1)]))
        d.zmax = float(vals.abs().max()) if vals.numel() else 0.0
        sd = torch.nan_to_num(sd)
        d.row_norms = sd.norm(dim=1).tolist()
        d.col_norms = sd.norm(dim=0).tolist()
    elif sa is not None:
        vals = _finite(torch.tensor(sa).reshape(-1))
        d.zmax = float(vals.abs().max()) if vals.numel() else 0.0
    return d
