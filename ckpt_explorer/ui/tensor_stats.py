"""What the tensor detail shows: statistics, a histogram and a 2-D slice, sampled when large.

A large tensor is first shown from a sample of contiguous blocks spread over it (a few MiB
read, whatever its size), said as such on the page; its exact statistics over every element
follow from a chunked pass (:func:`tensor_stats` with progress and cancel) that replaces them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

CHUNK = 1 << 22  # elements per statistics chunk
HIST_SAMPLE = 1 << 20  # elements a histogram is drawn from at most
SAMPLE_BLOCK = 4096  # contiguous elements per sampled block (one or a few pages each)
QUICK_ABOVE = 1 << 24  # elements above which the first figures come from the sample
HEATMAP_SIDE = 128  # largest heatmap side (rows and columns are strided down to it)


@dataclass
class TensorDetail:
    """Figures of one tensor.

    Attributes:
        name, dtype, shape: the tensor.
        stats: min, max, mean, std, mean |x|, L2 norm, zeros, NaN and Inf counts (all elements).
        hist_edges, hist_counts: histogram of finite values (``sampled`` says from how many).
        heatmap: a 2-D slice as nested lists (None for 0-D/1-D tensors), ``slice_label`` says which.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    stats: dict[str, float | int]
    hist_edges: list[float] = field(default_factory=list)
    hist_counts: list[int] = field(default_factory=list)
    sampled: int = 0
    heatmap: list[list[float]] | None = None
    slice_label: str = ""
    exact: bool = True  # stats over every element (False: over the ``sampled`` elements)

    def with_exact(self, stats: dict[str, float | int]) -> TensorDetail:
        """This detail with ``stats`` computed over every element."""
        return replace(self, stats=stats, exact=True)


def _as_float(t: torch.Tensor) -> torch.Tensor:
    import torch

    if t.dtype == torch.bool or not (t.is_floating_point() or t.is_complex()):
        return t.to(torch.float64)
    if t.is_complex():
        return t.abs().to(torch.float64)
    return t.to(torch.float64)


Progress = Callable[[int, int], Any]  # (elements done, elements in all)


def tensor_stats(
    t: torch.Tensor,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> dict[str, float | int]:
    """Statistics over every element, in float64 chunks (bounded memory); one fused pass per
    chunk with the diff's kernel (:mod:`ckpt_explorer.diff.kernel`) when numba is installed.
    ``progress(done, total)`` after each chunk; a set ``cancel`` stops the pass (raises
    :class:`Cancelled`)."""
    from ..diff import kernel

    flat = t.reshape(-1)
    n = flat.numel()
    if kernel.have_numba():
        parts = []
        for i in range(0, n, CHUNK):
            if cancel is not None and cancel.is_set():
                raise Cancelled
            parts.append(kernel.value_partials(_kernel_input(flat[i : i + CHUNK])))
            if progress is not None:
                progress(min(i + CHUNK, n), n)
        acc = kernel.merge_values(parts)
    else:
        acc = _torch_sums(flat, progress, cancel)
    k = acc["finite"]
    mean = acc["sum"] / k if k else float("nan")
    var = max(acc["sq"] / k - mean * mean, 0.0) if k else float("nan")
    return {
        "numel": n,
        "min": acc["min"] if k else float("nan"),
        "max": acc["max"] if k else float("nan"),
        "mean": mean,
        "std": var**0.5,
        "mean_abs": acc["abs"] / k if k else float("nan"),
        "l2": acc["sq"] ** 0.5,
        "zeros": acc["zeros"],
        "nan": acc["nan"],
        "inf": acc["inf"],
    }


def _kernel_input(x: torch.Tensor) -> torch.Tensor:
    """A chunk the kernel reads as it is (float dtypes) or widened by :func:`_as_float`."""
    return x if x.is_floating_point() else _as_float(x)


class Cancelled(Exception):
    """A statistics pass stopped by its ``cancel`` event."""


def _torch_sums(
    flat: torch.Tensor, progress: Progress | None = None, cancel: threading.Event | None = None
) -> dict[str, Any]:
    """The sums of :func:`tensor_stats` with torch ops (numba not installed)."""
    import torch

    acc: dict[str, Any] = {"sum": 0.0, "sq": 0.0, "abs": 0.0, "finite": 0, "nan": 0, "inf": 0}
    acc.update(zeros=0, min=float("inf"), max=float("-inf"))
    n = flat.numel()
    for start in range(0, n, CHUNK):
        if cancel is not None and cancel.is_set():
            raise Cancelled
        if progress is not None and start:
            progress(start, n)
        x = _as_float(flat[start : start + CHUNK])
        nan = torch.isnan(x)
        inf = torch.isinf(x)
        acc["nan"] += int(nan.sum())
        acc["inf"] += int(inf.sum())
        acc["zeros"] += int((x == 0).sum())
        f = x[~(nan | inf)]
        if f.numel():
            acc["finite"] += f.numel()
            acc["sum"] += float(f.sum())
            acc["sq"] += float((f * f).sum())
            acc["abs"] += float(f.abs().sum())
            acc["min"] = min(acc["min"], float(f.min()))
            acc["max"] = max(acc["max"], float(f.max()))
    return acc


def sample(t: torch.Tensor, limit: int = HIST_SAMPLE) -> torch.Tensor:
    """Up to ``limit`` elements of ``t`` as float64: all of them when it is small, else
    blocks of :data:`SAMPLE_BLOCK` contiguous elements spread evenly from its first to its
    last element (a strided sample would touch every page of a large mmapped tensor)."""
    import torch

    flat = t.reshape(-1)
    n = flat.numel()
    if n <= limit:
        return _as_float(flat)
    blocks = max(1, limit // SAMPLE_BLOCK)
    span = n - SAMPLE_BLOCK
    starts = [span * i // max(blocks - 1, 1) for i in range(blocks)]
    return torch.cat([_as_float(flat[s : s + SAMPLE_BLOCK]) for s in starts])


def histogram(
    t: torch.Tensor, bins: int = 60, x: torch.Tensor | None = None
) -> tuple[list[float], list[int], int]:
    """(edges, counts, elements used) over the finite values of a sample of ``t`` (or of
    ``x``, a sample taken already)."""
    import torch

    x = sample(t) if x is None else x
    used = x.numel()
    x = x[torch.isfinite(x)]
    if not x.numel():
        return [], [], used
    lo, hi = float(x.min()), float(x.max())
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    counts = torch.histc(x, bins=bins, min=lo, max=hi)
    edges = torch.linspace(lo, hi, bins + 1)
    return edges.tolist(), [int(c) for c in counts.tolist()], used


def slice_2d(t: torch.Tensor, side: int = HEATMAP_SIDE) -> tuple[list[list[float]] | None, str]:
    """The first 2-D slice of ``t`` strided down to ``side`` × ``side`` (None below 2-D)."""
    if t.dim() < 2:
        return None, ""
    lead = (0,) * (t.dim() - 2)
    m = t[lead] if lead else t
    rs = max(1, -(-m.shape[0] // side))
    cs = max(1, -(-m.shape[1] // side))
    view = _as_float(m[::rs, ::cs])
    label = "[" + ", ".join([*map(str, lead), ":", ":"]) + "]"
    if rs > 1 or cs > 1:
        label += f" ({_every(rs, 'row')}, {_every(cs, 'column')})"
    return view.tolist(), label


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``12th``, ``13th``, ``21st``, ..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _every(step: int, what: str) -> str:
    return f"every {what}" if step == 1 else f"every {ordinal(step)} {what}"


def tensor_detail(name: str, t: torch.Tensor, quick: bool = False) -> TensorDetail:
    """Everything the detail panel shows for ``t``; with ``quick``, a tensor of more than
    :data:`QUICK_ABOVE` elements gets statistics of its sample (``exact`` False) and the exact
    ones are left to a later :func:`tensor_stats` pass."""
    n = t.numel()
    x = sample(t) if n else None
    rough = quick and n > QUICK_ABOVE
    if rough:
        assert x is not None
        stats = {**tensor_stats(x), "numel": n}
    else:
        stats = tensor_stats(t)
    edges, counts, used = histogram(t, x=x) if n else ([], [], 0)
    heat, label = slice_2d(t)
    return TensorDetail(
        name,
        str(t.dtype).removeprefix("torch."),
        tuple(t.shape),
        stats,
        edges,
        counts,
        used,
        heat,
        label,
        exact=not rough,
    )
