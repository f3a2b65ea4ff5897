"""Names in a megatron-core dist checkpoint: stacked layer keys and the layer spec's key map.

``TransformerBlock.sharded_state_dict`` saves every layer's tensor under one key without the
layer index (``decoder.layers.self_attention.linear_qkv.weight``) whose global shape has a
leading layer axis (``prepend_axis_num`` 1, layer ``i`` at offset ``i``): one DCP tensor of
shape ``(num_layers, *param_shape)``. :func:`stacked_key` finds such keys; each is listed per
layer as ``decoder.layers.<i>.<rest>``.

The layer spec may also rename keys on save (``sharded_state_dict_keys_map``). The local
spec (``get_gpt_layer_local_spec``, and the T5/BERT local specs) saves ``input_layernorm.*``
as ``self_attention.linear_qkv.layer_norm_*`` and ``pre_mlp_layernorm.*`` as
``mlp.linear_fc1.layer_norm_*``, so that its checkpoints load into Transformer Engine's fused
``TELayerNormColumnParallelLinear`` (whose own parameters carry those names). Which spec wrote
a checkpoint is read from ``args.transformer_impl`` when saved, else from the ``_extra_state``
objects: megatron-core's own linear layers save ``None`` there, Transformer Engine modules their
FP8 metadata (:func:`is_local_spec`). Under the local spec the TE-style keys are shown as the
module's own parameter names (what ``named_parameters()`` and the legacy format call them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

STACKED = re.compile(r"^(?P<head>(?:[A-Za-z_]\w*\.)*layers)\.(?P<rest>[A-Za-z_].*)$")
# local spec: saved key part -> the module's own name (the inverse of its keys map)
LOCAL_SPEC_KEYS = (
    ("self_attention.linear_qkv.layer_norm_", "input_layernorm."),
    ("mlp.linear_fc1.layer_norm_", "pre_mlp_layernorm."),
)
LOCAL_IMPLS = ("local",)
TE_IMPLS = ("transformer_engine", "te")


def stacked_key(key: str) -> tuple[str, str] | None:
    """``(head, rest)`` of a key saved without its layer index (``decoder.layers`` +
    ``mlp.linear_fc1.weight``); None for other keys."""
    m = STACKED.match(key)
    return (m.group("head"), m.group("rest")) if m else None


def module_rest(rest: str, local_spec: bool) -> str:
    """A layer's key part as the module names it (the local spec's keys map undone)."""
    if local_spec:
        for saved, own in LOCAL_SPEC_KEYS:
            if rest.startswith(saved):
                return own + rest[len(saved) :]
    return rest


def layer_name(head: str, layer: int, rest: str, local_spec: bool) -> str:
    return f"{head}.{layer}.{module_rest(rest, local_spec)}"


def is_local_spec(args: dict[str, Any], extra_states: Iterable[Any]) -> tuple[bool, str]:
    """Whether the local layer spec wrote the checkpoint, and the evidence in words."""
    impl = args.get("transformer_impl")
    if isinstance(impl, str) and impl in LOCAL_IMPLS + TE_IMPLS:
        local = impl in LOCAL_IMPLS
        return local, f"args.transformer_impl {impl!r}"
    states = list(extra_states)
    if states and all(_is_none(s) for s in states):
        return True, (
            f"all {len(states)} _extra_state objects are None, as megatron-core's own linear "
            "layers save them"
        )
    if states:
        return False, "_extra_state objects hold data (Transformer Engine modules)"
    return False, "no _extra_state and no args.transformer_impl: keys shown as saved"


def _is_none(value: Any) -> bool:
    # megatron's ShardedObject data, saved one level down in a list
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    return value is None


def layer_count(args: dict[str, Any], leading: Iterable[int]) -> int | None:
    """Number of layers: ``args.num_layers``, else the leading size the stacked keys share."""
    n = args.get("num_layers")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n
    sizes = set(leading)
    return sizes.pop() if len(sizes) == 1 else None


def expand_layers(
    keys: list[str], stacked: dict[str, tuple[str, str]], layers: int
) -> list[tuple[str, int | None]]:
    """Keys in named-parameter order: ``(key, None)`` for a plain key, ``(key, i)`` per layer.

    The DCP metadata lists a model's keys in ``sharded_state_dict`` order, which walks the
    modules in order; a block's stacked keys come in one run (layer 0's walk), so the
    parameters of layer ``i`` are that run's keys at index ``i``.
    """
    out: list[tuple[str, int | None]] = []
    blocks: dict[str, list[str]] = {}
    items: list[tuple[str, str | None]] = []
    for key in keys:
        head = stacked[key][0] if key in stacked else None
        if head is None:
            items.append((key, None))
            continue
        if head not in blocks:
            blocks[head] = []
            items.append(("", head))
        blocks[head].append(key)
    for key, head in items:
        if head is None:
            out.append((key, None))
            continue
        out += [(k, i) for i in range(layers) for k in blocks[head]]
    return out
