"""Numeric health, streamed: NaN/Inf, all-zero tensors, extreme magnitudes, per tensor.

Each tensor is read through ``view.load`` (mmap) in chunks of ``chunk_elements`` and reduced
with one ``aminmax`` per chunk, while a read-ahead thread asks the kernel for the next tensors; NaN or Inf show up as a non-finite min/max and only then are
counted. Figures are Python floats (float64 tensors keep their precision).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..io.readahead import Readahead
from ..types import TensorRecord
from ..view import CheckpointView
from .findings import Finding
from .parts import is_float

CHUNK_ELEMENTS = 1 << 23
EXTREME = 1e4
ProgressFn = Callable[[int, int], Any]


@dataclass(frozen=True)
class TensorStats:
    """min, max (finite values), NaN and Inf counts and whether every element is zero."""

    numel: int
    min: float | None
    max: float | None
    nan: int
    inf: int

    @property
    def all_zero(self) -> bool:
        return self.numel > 0 and self.nan == 0 and self.inf == 0 and self.min == self.max == 0.0

    @property
    def absmax(self) -> float | None:
        if self.min is None or self.max is None:
            return None
        return max(abs(self.min), abs(self.max))

    def to_dict(self) -> dict[str, Any]:
        return {
            "numel": self.numel,
            "min": self.min,
            "max": self.max,
            "nan": self.nan,
            "inf": self.inf,
            "all_zero": self.all_zero,
        }


def tensor_stats(tensor: Any, chunk_elements: int = CHUNK_ELEMENTS) -> TensorStats:
    """Streamed figures of one (possibly mmapped) floating-point tensor."""
    import torch

    flat = tensor.reshape(-1)
    lo, hi, nan, inf = math.inf, -math.inf, 0, 0
    for start in range(0, flat.numel(), chunk_elements):
        chunk = flat[start : start + chunk_elements]
        if chunk.dtype not in (torch.float32, torch.float64):
            chunk = chunk.float()  # half types: exact in float32
        cmin, cmax = torch.aminmax(chunk)
        a, b = float(cmin), float(cmax)
        if math.isfinite(a) and math.isfinite(b):
            lo, hi = min(lo, a), max(hi, b)
            continue
        n_nan = int(torch.isnan(chunk).sum())
        n_inf = int(torch.isinf(chunk).sum())
        nan, inf = nan + n_nan, inf + n_inf
        finite = chunk[torch.isfinite(chunk)]
        if finite.numel():
            fmin, fmax = torch.aminmax(finite)
            lo, hi = min(lo, float(fmin)), max(hi, float(fmax))
    n = flat.numel()
    return TensorStats(n, lo if lo != math.inf else None, hi if hi != -math.inf else None, nan, inf)


def scan(
    leaves: list[tuple[str, CheckpointView]],
    progress: ProgressFn | None = None,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> Iterator[tuple[str, TensorRecord, TensorStats]]:
    """(shown name, record, stats) of every floating-point tensor, each file front to back."""
    work = [
        (label, view, r)
        for label, view in leaves
        for r in view.disk_order()
        if is_float(r.dtype) and r.loader is not None and r.numel
    ]
    total = sum(r.nbytes for _, _, r in work)
    ranges = [span for _, view, r in work if (span := view.disk_range(r)) is not None]
    done = 0
    with Readahead(ranges) as readahead:
        for label, view, r in work:
            stats = tensor_stats(view.load(r.name), chunk_elements)
            done += r.nbytes
            readahead.advance(done)
            if progress is not None:
                progress(done, total)
            yield label + r.name, r, stats


def _is_optimizer_state(name: str) -> bool:
    return ".state." in "." + name or name.startswith("state.")


def findings_for(
    name: str, record: TensorRecord, stats: TensorStats, extreme: float = EXTREME
) -> list[Finding]:
    """The numeric findings of one tensor."""
    out = []
    if stats.nan or stats.inf:
        out.append(
            Finding(
                "numeric.nonfinite",
                "error",
                f"{name} holds {stats.nan} NaN and {stats.inf} Inf of {stats.numel} values",
                "Training diverged or the save was corrupted; resume from an earlier checkpoint.",
                tensor=name,
                file=record.file,
            )
        )
    if stats.all_zero and len(record.shape) >= 2 and not _is_optimizer_state(name):
        out.append(
            Finding(
                "numeric.all_zero",
                "warning",
                f"{name} is all zeros ({stats.numel} values)",
                "A weight matrix of zeros is usually a failed gather or a parameter that was "
                "never loaded; fine only for zero-initialised layers (e.g. LoRA B).",
                tensor=name,
                file=record.file,
            )
        )
    absmax = stats.absmax
    if absmax is not None and absmax > extreme:
        out.append(
            Finding(
                "numeric.extreme",
                "warning",
                f"{name} reaches |x| = {absmax:.4g} (threshold {extreme:g})",
                "Values this large overflow in fp16 and often precede divergence.",
                tensor=name,
                file=record.file,
            )
        )
    return out
