"""FP8 weights with a float32 scale per block, as DeepSeek-V3 ships them.

``quantization_config = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128,
128]}``; each quantized ``<m>.weight`` is float8 (e4m3fn, or e5m2) beside
``<m>.weight_scale_inv``, one float32 per 128x128 block (partial blocks at the edges). The
value is ``fp8 * scale_inv`` in float32 (DeepSeek's ``fp8_cast_bf16.py`` computes exactly that,
then casts to bf16). transformers' ``FineGrainedFP8Config`` reads the same layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from itertools import compress, repeat
from operator import add, is_not, itemgetter, methodcaller
from typing import TYPE_CHECKING, Any, cast

from .parts import Grouped, Load, PartColumns, QuantWeight, Stored, StoredParts
from .unpack import expand_blocks

if TYPE_CHECKING:
    import torch

METHOD = "fp8"
FP8_DTYPES = {"float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}
SCALE = ".weight_scale_inv"


def dequantize_block(weight: torch.Tensor, scale: torch.Tensor, bh: int, bw: int) -> torch.Tensor:
    import torch

    rows, cols = weight.shape
    return weight.to(torch.float32) * expand_blocks(scale.to(torch.float32), rows, cols, bh, bw)


def _dequantize_parts(p: dict[str, torch.Tensor], bh: int, bw: int) -> torch.Tensor:
    return dequantize_block(p["weight"], p["weight_scale_inv"], bh, bw)


def group(records: Mapping[str, Stored], config: dict[str, Any], load: Load) -> Grouped:
    """One pass over the names: each ``<m>.weight_scale_inv`` beside a ``<m>.weight``. The
    weights of one stored dtype share everything but name, shape and parts (one family)."""
    stored = records if isinstance(records, StoredParts) else StoredParts.of(records)
    block = config.get("weight_block_size") or [128, 128]
    bh, bw = int(block[0]), int(block[1])
    cut = -len(SCALE)
    scales = list(filter(methodcaller("endswith", SCALE), stored))
    weights = map(add, map(itemgetter(slice(None, cut)), scales), repeat(".weight"))
    found = list(map(stored.positions.get, weights))  # each name made, looked up, dropped
    if None in found:  # a scale without its weight stays listed as stored
        scales = list(compress(scales, map(is_not, found, repeat(None))))
        found = list(filter(partial(is_not, None), found))
    rows = cast(list[int], found)
    names = list(map(stored.names.__getitem__, rows))  # the listing's strings, not copies
    dtypes = list(map(stored.dtypes.__getitem__, rows))
    seen: dict[tuple[int, ...], tuple[int, ...]] = {}

    def shared(shape: tuple[int, ...]) -> tuple[int, ...]:  # a few shapes, one tuple each
        return seen.setdefault(shape, shape)

    shapes = list(map(shared, map(tuple, map(stored.shapes.__getitem__, rows))))
    dequantize = partial(_dequantize_parts, bh=bh, bw=bw)
    families: list[QuantWeight] = []
    by_dtype: dict[str, int] = {}
    for dtype in dict.fromkeys(dtypes):  # one family a stored dtype, in order of appearance
        i = dtypes.index(dtype)
        kind = FP8_DTYPES.get(dtype, dtype)
        by_dtype[dtype] = len(families)
        families.append(
            QuantWeight(
                names[i],
                shapes[i],
                METHOD,
                kind,
                8,
                f"block {bh}x{bw}",
                {"weight": names[i], "weight_scale_inv": scales[i]},
                {"block_rows": bh, "block_cols": bw, "fp8": kind, "scale_of": "scale_inv"},
                dequantize,
            )
        )
    family = list(map(by_dtype.__getitem__, dtypes))
    return Grouped(names, shapes, PartColumns(names, scales), family, families)
