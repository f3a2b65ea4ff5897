"""AWQ exports (``quant_method: awq``, ``version: gemm``: AutoAWQ, llm-awq; vLLM reads them).

Each quantized Linear ``<m>`` is stored as ``<m>.qweight`` int32 ``[in, out / 8]``: eight
4-bit codes per word along the output dimension in AWQ's interleaved order (nibble ``j`` of a
word holds output column ``8 * word + (0, 2, 4, 6, 1, 3, 5, 7)[j]``), ``<m>.qzeros`` int32
``[groups, out / 8]`` packed the same way (zeros as they are), ``<m>.scales`` ``[groups,
out]``; groups are ``group_size`` consecutive input columns. The weight is
``W[o, i] = scales[i // g, o] * (q[i, o] - zeros[i // g, o])``, computed in float32 (AutoAWQ's
``dequantize_gemm`` computes it in float16: that is this value rounded once). The GEMV layout
(``version: gemv``) is left listed as stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from .gptq import unpack_codes
from .parts import Load, QuantWeight, Stored, module_of

if TYPE_CHECKING:
    import torch

METHOD = "awq"
ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # the output column of each nibble, within 8


def _columns(packed: torch.Tensor, count: int) -> torch.Tensor:
    """Codes ``[rows, count]`` in natural column order."""
    import torch

    raw = unpack_codes(packed, 4, count)
    order = torch.tensor(ORDER)
    index = (torch.arange(count) // 8 * 8).reshape(-1, 8)[:, :1] + order.argsort()
    return raw[:, index.reshape(-1)[:count]]


def dequantize(parts: dict[str, torch.Tensor], group_size: int) -> torch.Tensor:
    import torch

    scales = parts["scales"].to(torch.float32)
    rows, cols = parts["qweight"].shape[0], int(scales.shape[1])
    q = _columns(parts["qweight"], cols).to(torch.float32)
    zeros = _columns(parts["qzeros"], cols).to(torch.float32)
    groups = torch.arange(rows) // group_size
    if int(groups.max()) >= scales.shape[0]:
        raise IndexError(
            f"{rows} rows need {int(groups.max()) + 1} groups, {scales.shape[0]} stored"
        )
    return ((q - zeros[groups]) * scales[groups]).t().contiguous()


def group(records: Mapping[str, Stored], config: dict[str, Any], load: Load) -> list[QuantWeight]:
    bits = int(config.get("bits") or config.get("w_bit") or 4)
    gs = int(config.get("group_size") or config.get("q_group_size") or 128)
    version = str(config.get("version") or "gemm").lower()
    if bits != 4 or version != "gemm" or gs <= 0:
        return []
    found = []
    for name, rec in records.items():
        module = module_of(name, ".qweight")
        if module is None or len(rec.shape) != 2 or rec.dtype != "int32":
            continue
        parts = {role: f"{module}.{role}" for role in ("qweight", "qzeros", "scales")}
        if any(p not in records for p in parts.values()):
            continue
        rows, cols = int(rec.shape[0]), int(records[parts["scales"]].shape[-1])
        params = {
            "group_size": gs,
            "symmetric": not config.get("zero_point", True),
            "strategy": "group",
            "version": version,
            "moved_by": "AWQ (activation-aware scaling)",
        }
        found.append(
            QuantWeight(
                f"{module}.weight",
                (cols, rows),
                METHOD,
                "int4",
                bits,
                f"group {gs}",
                parts,
                params,
                partial(dequantize, group_size=gs),
            )
        )
    return found
