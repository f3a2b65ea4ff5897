"""The tp x pp sizes that fit: every check (and memory, given --gpu-mem) for each pair."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..types import TensorRecord
from .arch import ArchFacts
from .checks import run_checks
from .layout import Layout
from .memory import memory_per_gpu

SIZES = (1, 2, 4, 8, 16)


def fit_grid(a: ArchFacts, tensors: Sequence[TensorRecord], lay: Layout) -> list[dict[str, object]]:
    """One cell per (tp, pp) in SIZES with the asked plugin / ZeRO / dtype / GPU count.

    Cells use ``gpus`` when given (pairs that do not divide it fail), else tp x pp x ep GPUs.
    """
    cells: list[dict[str, object]] = []
    for tp in SIZES:
        for pp in SIZES:
            cell = replace(lay, tp=tp, pp=pp)
            checks = run_checks(a, cell)
            reasons = [c.message for c in checks if c.ok is False]
            unknown = [c.message for c in checks if c.ok is None]
            mem = memory_per_gpu(tensors, a, cell) if cell.dp else None
            if mem is not None and mem.fits is False:
                reasons.append(f"memory {mem.total:,} B per GPU > {cell.gpu_mem:,} B")
            fits: bool | None = not reasons and (None if unknown else True)
            cells.append(
                {
                    "tp": tp,
                    "pp": pp,
                    "fits": False if reasons else fits,
                    "reasons": reasons or unknown,
                    "memory_total": mem.total if mem else None,
                }
            )
    return cells
