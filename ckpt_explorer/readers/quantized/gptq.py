"""GPTQ exports (``quant_method: gptq``: AutoGPTQ, GPTQModel, optimum; vLLM, TGI read them).

Each quantized Linear ``<m>`` is stored as:

- ``<m>.qweight`` int32 ``[in * bits / 32, out]``: the integer codes packed along the input
  dimension, value ``i`` of a column at bit ``i * bits`` of the column's little-endian word
  stream (3-bit codes straddle words);
- ``<m>.qzeros`` int32 ``[groups, out * bits / 32]``: the zero points packed the same way
  along the output dimension; the legacy ``gptq`` checkpoint format stores each zero minus one
  (``gptq_v2`` stores it as is: GPTQModel adds one back, masked to the field, when it loads);
- ``<m>.scales`` ``[groups, out]`` (float16 mostly);
- ``<m>.g_idx`` int32 ``[in]``: the group of each input column (``desc_act`` permutes them;
  without it ``i // group_size``);
- ``<m>.bias``: the Linear's own bias, listed under its HF name.

The weight is ``W[o, i] = scales[g_idx[i], o] * (q[i, o] - zeros[g_idx[i], o])`` computed in
float32 (GPTQModel's offline dequantizer; its float16 kernels round that once more). Bit-planar
layouts (``gptq_p``, 5/6/7-bit) are left listed as stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from .parts import Load, QuantWeight, Stored, module_of
from .unpack import unpack_int32

if TYPE_CHECKING:
    import torch

METHOD = "gptq"
BITS = (2, 3, 4, 8)
V1_FORMATS = ("gptq", "gemm")  # zeros stored minus one (GPTQModel's _uses_gptq_v1_qzeros)


def unpack_codes(packed: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """Unsigned ``bits``-wide codes of each row's little-endian int32 word stream."""
    return unpack_int32(packed, bits, count) + (1 << (bits - 1))


def checkpoint_format(config: dict[str, Any]) -> str:
    return str(config.get("checkpoint_format") or config.get("format") or "gptq").strip().lower()


def dequantize(
    parts: dict[str, torch.Tensor], bits: int, v1: bool, group_size: int
) -> torch.Tensor:
    import torch

    qweight = parts["qweight"]
    cols = int(qweight.shape[1])
    rows = qweight.shape[0] * 32 // bits
    g_idx = parts.get("g_idx")
    if g_idx is not None:
        rows = int(g_idx.numel())
        groups = g_idx.reshape(-1).long()
    else:
        groups = torch.arange(rows) // (group_size if group_size > 0 else rows)
    if groups.numel() and (int(groups.min()) < 0 or int(groups.max()) >= parts["scales"].shape[0]):
        raise IndexError(f"g_idx names groups outside the {parts['scales'].shape[0]} stored")
    q = unpack_codes(qweight.t(), bits, rows)  # [out, in]
    zeros = unpack_codes(parts["qzeros"], bits, cols)  # [groups, out]
    if v1:
        zeros = (zeros + 1) & ((1 << bits) - 1)
    scales = parts["scales"].to(torch.float32)
    value = (q.t().to(torch.float32) - zeros[groups].to(torch.float32)) * scales[groups]
    return value.t().contiguous()


def group(records: Mapping[str, Stored], config: dict[str, Any], load: Load) -> list[QuantWeight]:
    bits = int(config.get("bits") or 4)
    fmt = checkpoint_format(config)
    if bits not in BITS or fmt not in (*V1_FORMATS, "gptq_v2"):
        return []
    gs = int(config.get("group_size") or -1)
    v1 = fmt in V1_FORMATS
    found = []
    for name, rec in records.items():
        module = module_of(name, ".qweight")
        if module is None or len(rec.shape) != 2 or rec.dtype != "int32":
            continue
        parts = {role: f"{module}.{role}" for role in ("qweight", "qzeros", "scales", "g_idx")}
        if "g_idx" in parts and parts["g_idx"] not in records:
            del parts["g_idx"]
        if any(p not in records for p in parts.values()):
            continue
        out = int(rec.shape[1])
        rows = (
            int(records[parts["g_idx"]].shape[0])
            if "g_idx" in parts
            else int(rec.shape[0]) * 32 // bits
        )
        params = {
            "group_size": gs if gs > 0 else rows,
            "desc_act": bool(config.get("desc_act")),
            "symmetric": bool(config.get("sym", True)),
            "checkpoint_format": fmt,
            "strategy": "group" if gs > 0 else "channel",
            "moved_by": "GPTQ (error feedback)",
        }
        found.append(
            QuantWeight(
                f"{module}.weight",
                (out, rows),
                METHOD,
                f"int{bits}",
                bits,
                f"group {gs}" if gs > 0 else "channel",
                parts,
                params,
                partial(dequantize, bits=bits, v1=v1, group_size=gs),
            )
        )
    return found
