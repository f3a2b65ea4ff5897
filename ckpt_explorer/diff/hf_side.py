"""A Megatron training state diffed against an HF model is compared as the HF model it is.

Megatron fuses what HF keeps apart: ``linear_qkv`` holds q, k and v, and SwiGLU's
``linear_fc1`` holds gate and up. GPT-2's ``Conv1D`` also stores its weights transposed. Names
alone cannot pair such tensors. When one side is a Megatron state and the other a model whose
names are more the HF model's than Megatron's, the Megatron side is replaced by its HF view
(:func:`..readers.megatron.hf.hf_view`). Each HF tensor is then compared with what the Megatron
tensors convert to, under the HF name. When the Megatron model has no HF twin (see
:mod:`..readers.megatron.hf_config`), both sides are diffed as they are.
"""

from __future__ import annotations

from ..errors import CkptExplorerError
from ..readers.megatron.hf import hf_view, is_megatron
from ..view import CheckpointView
from .align import strip_wrappers


def _keys(names: list[str]) -> set[str]:
    return {strip_wrappers(n.partition("/")[2] or n) for n in names}


def _as_hf(megatron: CheckpointView, other: CheckpointView) -> CheckpointView:
    if other.kind != "model" or is_megatron(other):
        return megatron
    try:
        hf = hf_view(megatron)
    except CkptExplorerError:
        return megatron
    theirs = _keys(other.names())
    if len(_keys(hf.names()) & theirs) > len(_keys(megatron.parts["model"].names()) & theirs):
        return hf
    return megatron


def hf_sides(a: CheckpointView, b: CheckpointView) -> tuple[CheckpointView, CheckpointView]:
    """``(a, b)``, with a Megatron side seen as its HF model where the other is an HF model."""
    if is_megatron(a) and not is_megatron(b):
        return _as_hf(a, b), b
    if is_megatron(b) and not is_megatron(a):
        return a, _as_hf(b, a)
    return a, b
