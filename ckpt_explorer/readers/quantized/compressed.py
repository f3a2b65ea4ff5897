"""compressed-tensors exports (``quant_method: compressed-tensors``: llm-compressor, vLLM).

``quantization_config.config_groups`` name each group's weight arguments (``num_bits``,
``type`` int/float, ``strategy`` tensor/channel/group/block, ``group_size``,
``block_structure``, ``symmetric``) and the groups' ``format``:

- ``pack-quantized``: ``<m>.weight_packed`` int32 words holding ``32 / bits`` values each
  (offset by ``2^(bits-1)``), ``<m>.weight_shape`` the logical shape, ``<m>.weight_scale`` and
  for asymmetric schemes ``<m>.weight_zero_point`` packed the same way along rows;
- ``int-quantized`` / ``float-quantized`` / ``naive-quantized``: ``<m>.weight`` stored as int8
  or float8 beside ``<m>.weight_scale`` (and ``<m>.weight_zero_point``).

Static activation scales (``<m>.input_scale`` ...) are listed as parts of their module's
weight. Dequantizing is compressed-tensors' own: ``(q - zero_point) * scale`` in the scale's dtype,
the scale broadcast over its tensor, channel (row), group (``group_size`` columns) or block.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from .parts import Load, QuantWeight, Stored, module_of
from .unpack import expand_blocks, unpack_int32

if TYPE_CHECKING:
    import torch

METHOD = "compressed-tensors"
ACTIVATION_PARTS = ("input_scale", "input_zero_point", "output_scale", "output_zero_point")
FLOAT8 = {"float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}


def _scheme_for(module: str, groups: dict[str, Any]) -> dict[str, Any] | None:
    """The group whose targets name ``module`` by regex; else the first group aimed at a
    module class (``Linear``): a class cannot be told from the files."""
    by_class = None
    for group in groups.values():
        if not isinstance(group, dict) or not isinstance(group.get("weights"), dict):
            continue
        for target in group.get("targets") or []:
            if isinstance(target, str) and target.startswith("re:"):
                if re.match(target[3:], module):
                    return group
            elif by_class is None:
                by_class = group
    return by_class


def dequantize(
    q: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    args: dict[str, Any],
) -> torch.Tensor:
    """compressed-tensors' ``dequantize`` for a 2-D weight."""
    strategy = args.get("strategy")
    rows, cols = q.shape
    if strategy == "group":
        gs = int(args["group_size"])
        scale = scale.reshape(rows, -1).repeat_interleave(gs, 1)[:, :cols]
        if zero_point is not None:
            zero_point = zero_point.reshape(rows, -1).repeat_interleave(gs, 1)[:, :cols]
    elif strategy == "block":
        bh, bw = args["block_structure"]
        scale = expand_blocks(scale, rows, cols, bh, bw)
        if zero_point is not None:
            zero_point = expand_blocks(zero_point, rows, cols, bh, bw)
    value = q.to(scale.dtype)
    if zero_point is not None:
        value = value - zero_point.to(scale.dtype)
    return value * scale


def _kind(args: dict[str, Any], stored: str) -> str:
    if args.get("type") == "float":
        return FLOAT8.get(stored, f"fp{args.get('num_bits')}")
    return f"int{args.get('num_bits')}"


def _block(args: dict[str, Any]) -> str:
    strategy = args.get("strategy")
    if strategy == "group":
        return f"group {args.get('group_size')}"
    if strategy == "block":
        bh, bw = args.get("block_structure") or ("?", "?")
        return f"block {bh}x{bw}"
    return str(strategy)


def _unpacked(parts: dict[str, torch.Tensor], args: dict[str, Any]) -> torch.Tensor:
    bits = int(args["num_bits"])
    shape = [int(v) for v in parts["weight_shape"].tolist()]
    q = unpack_int32(parts["weight_packed"], bits, shape[-1])
    zp = parts.get("weight_zero_point")
    if zp is not None and not args.get("symmetric", True):
        zp = unpack_int32(zp.t(), bits, shape[0]).t()
    elif zp is not None and zp.dtype == parts["weight_packed"].dtype and zp.shape[0] != shape[0]:
        zp = None  # a symmetric scheme's packed zeros
    return dequantize(q, parts["weight_scale"], zp, args)


def _plain(parts: dict[str, torch.Tensor], args: dict[str, Any]) -> torch.Tensor:
    return dequantize(parts["weight"], parts["weight_scale"], parts.get("weight_zero_point"), args)


def group(records: Mapping[str, Stored], config: dict[str, Any], load: Load) -> list[QuantWeight]:
    groups = config.get("config_groups") or {}
    found = []
    for name in records:
        module = module_of(name, ".weight_scale")
        if module is None:
            continue
        scheme = _scheme_for(module, groups)
        if scheme is None:
            continue
        args = dict(scheme["weights"])
        fmt = scheme.get("format") or config.get("format")
        parts: dict[str, str] = {}
        packed = f"{module}.weight_packed"
        if packed in records:
            parts["weight_packed"] = packed
            parts["weight_shape"] = f"{module}.weight_shape"
            if parts["weight_shape"] not in records:
                continue
            stored_shape = load(parts["weight_shape"])
            if stored_shape.dim() != 1 or stored_shape.numel() != 2:
                continue  # not a 2-D weight's shape: the parts stay listed as stored
            shape = tuple(int(v) for v in stored_shape.tolist())
            fn = _unpacked
            stored = "int32"
        elif f"{module}.weight" in records:
            parts["weight"] = f"{module}.weight"
            shape = tuple(records[parts["weight"]].shape)
            fn = _plain
            stored = records[parts["weight"]].dtype
        else:
            continue
        parts["weight_scale"] = name
        if f"{module}.weight_zero_point" in records:
            parts["weight_zero_point"] = f"{module}.weight_zero_point"
        for role in ACTIVATION_PARTS:  # static activation scales: the module's, not a weight
            if f"{module}.{role}" in records:
                parts[role] = f"{module}.{role}"
        params = {k: v for k, v in args.items() if v is not None}
        params["format"] = fmt
        found.append(
            QuantWeight(
                f"{module}.weight",
                shape,
                METHOD,
                _kind(args, stored),
                int(args.get("num_bits") or 0),
                _block(args),
                parts,
                params,
                partial(fn, args=args),
            )
        )
    return found
