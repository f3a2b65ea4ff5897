"""What llama.cpp's K-quants (Q2_K ... Q6_K) should cost, from the export's own scales.

A K-quant super-block of 256 values stores an F16 ``d`` (and ``dmin``) and one quantized scale
(and min) per sub-block of 16 or 32 values; each value is a level ``L`` of ``2^bits`` on its
sub-block's grid ``lo + L * step``. llama.cpp's writer (``quantize_row_q*_K``, with or without
an importance matrix) first chooses and quantizes the scales, then gives every value the grid
level nearest to it (``nearest_int`` clamped to the levels). So, with the grid read from the
export's own scales, an element may be off by at most half its sub-block's step, or, where the
source lies beyond the grid's ends (the clamp), by its distance to the nearer end.

The grid is read through ``gguf.quants.dequantize`` itself: the blocks are dequantized once with
every level field set to 0 and once set to 1 (``lo`` and ``lo + step``), so no scale packing is
decoded here. The writer quantizes the intermediate file (F16, BF16 or F32), not the trained
weights: twice the larger of their F16 / BF16 roundings is added (the distance to the grid moves
by at most that rounding, and the stored value by it again), plus the float32 arithmetic of the
dequantization. A fault that keeps a consistent grid (blocks of another tensor, a scale changed)
still moves values away from the source by far more than that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# type -> (bytes per 256-block, levels, [(start, end, byte meaning "every field is level 1")]);
# the level fields not listed (high bits) are zero in both probes
LAYOUTS: dict[str, tuple[int, int, tuple[tuple[int, int, int], ...]]] = {
    "Q2_K": (84, 4, ((16, 80, 0x55),)),  # scales[16] qs[64] d dmin
    "Q3_K": (110, 8, ((0, 32, 0x00), (32, 96, 0x55))),  # hmask[32] qs[64] scales[12] d
    "Q4_K": (144, 16, ((16, 144, 0x11),)),  # d dmin scales[12] qs[128]
    "Q5_K": (176, 32, ((16, 48, 0x00), (48, 176, 0x11))),  # d dmin scales[12] qh[32] qs[128]
    "Q6_K": (210, 64, ((0, 128, 0x11), (128, 192, 0x00))),  # ql[128] qh[64] scales[16] d
}
F32_SLACK = 2.0**-20


def _probe(kind: str, blocks: Any, level: int, rows: int) -> Any:
    import numpy as np
    from gguf import GGMLQuantizationType, quants

    probe = blocks.copy()
    for start, end, one in LAYOUTS[kind][2]:
        probe[:, start:end] = one if level else 0
    values = quants.dequantize(probe.reshape(rows, -1), GGMLQuantizationType[kind])
    return np.asarray(values, dtype=np.float64).reshape(rows, -1)


def kquant(x: torch.Tensor, kind: str, raw: Any) -> torch.Tensor:
    """Each element's budget: half its sub-block's stored step (its distance to the grid's end
    where it lies beyond it), plus the intermediate file's rounding. ``x``: the source (2-D, float64, the export's
    layout); ``raw``: the export tensor's bytes (uint8, whole blocks, same element order)."""
    import numpy as np
    import torch

    size, levels, _ = LAYOUTS[kind]
    rows = x.shape[0]
    blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, size)
    lo = torch.from_numpy(_probe(kind, blocks, 0, rows)).reshape(x.shape)
    step = torch.from_numpy(_probe(kind, blocks, 1, rows)).reshape(x.shape) - lo
    hi = lo + (levels - 1) * step
    safe = torch.where(step != 0, step, torch.ones_like(step))
    level = torch.clamp(torch.round((x - lo) / safe), 0, levels - 1)
    level = torch.where(step != 0, level, torch.zeros_like(level))
    grid = torch.maximum((x - (lo + level * step)).abs(), step.abs() / 2)
    rounding = torch.maximum(
        (x - x.to(torch.float16).double()).abs(), (x - x.to(torch.bfloat16).double()).abs()
    )
    scale = torch.maximum(lo.abs(), hi.abs())
    return grid + 2 * rounding + F32_SLACK * (x.abs() + scale + step.abs())
