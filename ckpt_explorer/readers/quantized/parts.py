"""What every quantized-safetensors scheme shares: one logical weight made of stored parts.

A quantized export stores each quantized weight as several tensors (the packed values, their
scales, zero points, a lookup table, a JSON quant state ...). A scheme module claims the parts
of each weight it recognises and returns one :class:`QuantWeight` per weight: its HF name, its
logical shape, the scheme's words (bits, block or group size) and a function that dequantizes
the parts to float exactly as the scheme's own library does. Tensors no scheme claims stay as
they are (norms, embeddings, ignored modules kept in float).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from ...types import TensorRecord

MAX_JSON_BYTES = 1 << 20
Load = Callable[[str], "torch.Tensor"]  # a stored part's values by its name


@dataclass(frozen=True)
class QuantWeight:
    """One logical weight of a quantized export.

    Attributes:
        name: the HF name of the weight it encodes (``...q_proj.weight``).
        shape: its logical shape.
        scheme: the scheme (``compressed-tensors``, ``fp8``, ``bitsandbytes`` ...).
        kind: the storage type in short (``int4``, ``fp8_e4m3``, ``nf4`` ...): the key of
            its rule in :data:`~ckpt_explorer.diff.quant_budget.RULES`.
        bits: bits per stored value.
        block: how values share a scale, in words (``group 32``, ``block 128x128``,
            ``channel``, ``tensor``).
        parts: the stored tensors, role -> stored name.
        params: what dequantizing and the budget need (group size, symmetric, block shape ...).
        dequantize: the parts (role -> tensor) -> the float values.
    """

    name: str
    shape: tuple[int, ...]
    scheme: str
    kind: str
    bits: int
    block: str
    parts: dict[str, str]
    params: dict[str, Any] = field(default_factory=dict)
    dequantize: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None

    @property
    def label(self) -> str:
        """The record's dtype: kind and sharing, e.g. ``int4/group32``."""
        return f"{self.kind}/{self.block.replace(' ', '')}"

    # a JSON field list: alike in shape with other records' to_json only
    def describe(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in self.params.items() if isinstance(v, int | float | str | bool)},
            "scheme": self.scheme,
            "type": self.kind,
            "bits": self.bits,
            "block": self.block,
            "parts": dict(self.parts),
        }

    def values(self, load: Load) -> torch.Tensor:
        assert self.dequantize is not None
        return self.dequantize({role: load(name) for role, name in self.parts.items()})


Grouper = Callable[[Mapping[str, "TensorRecord"], dict[str, Any], Load], list[QuantWeight]]


def module_of(name: str, suffix: str) -> str | None:
    """``a.b.weight_packed`` with suffix ``.weight_packed`` -> ``a.b``; None if no match."""
    return name[: -len(suffix)] if name.endswith(suffix) else None


def json_part(t: torch.Tensor) -> dict[str, Any]:
    """A JSON document stored as a uint8 tensor (bitsandbytes' quant state)."""
    import json

    if t.numel() > MAX_JSON_BYTES:
        raise ValueError(f"a {t.numel()}-byte quant state (at most {MAX_JSON_BYTES} read)")
    doc = json.loads(bytes(t.reshape(-1).tolist()).decode("utf-8"))
    if not isinstance(doc, dict):
        raise ValueError("the quant state is not a JSON object")
    return doc
