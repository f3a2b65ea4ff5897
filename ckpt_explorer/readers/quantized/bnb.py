"""bitsandbytes exports (``quant_method: bitsandbytes``, transformers' ``save_pretrained``).

- 4-bit (``load_in_4bit``, nf4 or fp4): ``<m>.weight`` is uint8, two 4-bit codes a byte (the
  first value in the high nibble), beside ``<m>.weight.absmax`` (one scale per ``blocksize``
  values of the flattened weight), ``<m>.weight.quant_map`` (the 16 code values) and
  ``<m>.weight.quant_state.bitsandbytes__<nf4|fp4>``, a JSON document stored as uint8 (quant
  type, blocksize, dtype, logical shape). With double quantization the absmax is itself uint8
  codes of ``<m>.weight.nested_quant_map`` scaled per 256-block by
  ``<m>.weight.nested_absmax``, plus the JSON's ``nested_offset``. The value is
  ``quant_map[code] * absmax[block]`` in float32 (bitsandbytes' own ``dequantize_4bit``).
- 8-bit (``load_in_8bit``, LLM.int8): ``<m>.weight`` int8 beside ``<m>.SCB`` (one absmax a
  row) and ``<m>.weight_format``; the value is ``q * SCB[row] * (1 / 127)`` in float32
  (bitsandbytes' ``int8_vectorwise_dequant``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from .parts import Load, QuantWeight, Stored, json_part, module_of

if TYPE_CHECKING:
    import torch

METHOD = "bitsandbytes"
STATE = ".weight.quant_state.bitsandbytes__"
INV_127 = 7.874015718698502e-3  # bitsandbytes' constant


def _blockwise(
    codes: torch.Tensor, absmax: torch.Tensor, table: torch.Tensor, block: int
) -> torch.Tensor:
    """``table[codes]`` times each block's absmax over the flattened values (last block short)."""
    import torch

    out = table[codes.to(torch.int64)]
    n = out.numel()
    per = absmax.repeat_interleave(block)[:n]
    return out * per


def dequantize_4bit(parts: dict[str, torch.Tensor], state: dict[str, Any]) -> torch.Tensor:
    import torch

    packed = parts["weight"].reshape(-1).to(torch.int32)
    codes = torch.stack((packed >> 4, packed & 0xF), dim=-1).reshape(-1)
    shape = [int(v) for v in state["shape"]]
    n = 1
    for d in shape:
        n *= d
    absmax = parts["absmax"]
    if "nested_absmax" in parts:
        absmax = _blockwise(
            absmax.reshape(-1),
            parts["nested_absmax"].float(),
            parts["nested_quant_map"].float(),
            int(state.get("nested_blocksize", 256)),
        )
        absmax = absmax + float(state.get("nested_offset", 0.0))
    values = _blockwise(
        codes[:n], absmax.float(), parts["quant_map"].float(), int(state["blocksize"])
    )
    return values.reshape(shape).to(getattr(torch, str(state.get("dtype", "float32"))))


def dequantize_int8(parts: dict[str, torch.Tensor]) -> torch.Tensor:
    return parts["weight"] * parts["SCB"].reshape(-1, 1) * INV_127


def group(records: Mapping[str, Stored], config: dict[str, Any], load: Load) -> list[QuantWeight]:
    found = []
    for name in records:
        if STATE in name:
            found += _four_bit(records, name, load)
        module = module_of(name, ".SCB")
        if module is not None and f"{module}.weight" in records:
            weight = f"{module}.weight"
            parts = {"weight": weight, "SCB": name}
            if f"{module}.weight_format" in records:
                parts["weight_format"] = f"{module}.weight_format"
            found.append(
                QuantWeight(
                    weight,
                    tuple(records[weight].shape),
                    METHOD,
                    "int8",
                    8,
                    "row",
                    parts,
                    {
                        "levels": 127.0,
                        "symmetric": True,
                        "strategy": "channel",
                        "input_dtype": "float16",
                    },
                    dequantize_int8,
                )
            )
    return found


def _four_bit(records: Mapping[str, Stored], name: str, load: Load) -> list[QuantWeight]:
    module, _, qtype = name.partition(STATE)
    weight = f"{module}.weight"
    if weight not in records:
        return []
    try:
        state = json_part(load(name))
        shape = tuple(int(v) for v in state.get("shape", ()))
        block = int(state.get("blocksize", 64))
        if block <= 0:
            raise ValueError(block)
    except (ValueError, TypeError, UnicodeDecodeError):
        return []  # not a quant state this reader understands: its parts stay listed as stored
    parts = {"weight": weight, "state": name}
    for role in ("absmax", "quant_map", "nested_absmax", "nested_quant_map"):
        if f"{weight}.{role}" in records:
            parts[role] = f"{weight}.{role}"
    nested = "nested_absmax" in parts
    params = {"blocksize": block, "double_quant": nested, "quant_type": qtype}
    return [
        QuantWeight(
            weight,
            shape,
            METHOD,
            qtype,
            4,
            f"block {block}",
            parts,
            params,
            partial(dequantize_4bit, state=state),
        )
    ]
