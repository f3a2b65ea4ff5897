"""Optimizer ids of a megatron-core optimizer, numbered as megatron-core and torch number them.

A dist checkpoint keys optimizer states by parameter (``optimizer.state.exp_avg.<key>``), so
it records no ids; the ids shown are those the live torch optimizer had, rebuilt by this rule
(checked against the live optimizers' ids on real runs, tests/readers/test_megatron_reader.py):

1. ``_get_param_groups`` (megatron/core/optimizer/__init__.py) walks ``named_parameters()``
   and puts each trainable parameter in the group of its overrides. The standard overrides
   (``get_standard_config_overrides``): ``wd_mult`` 0.0 for biases (``*.bias``) and 1-D
   parameters (with ``apply_wd_to_qk_layernorm``: except ``q_layernorm.`` / ``k_layernorm.``),
   ``max_lr`` = ``decoupled_lr`` for the embedding / output weights when ``decoupled_lr`` is
   set; ``is_expert_parallel`` for expert parameters. The groups are ordered with the group
   without overrides first (``sorted(..., key=(x[0] is not None, x[0]))``); the groups saved
   in ``common.pt`` carry ``wd_mult`` / ``is_decoupled_lr`` / ``is_expert_parallel``, so each
   parameter's group is the one saved group whose flags are its own.
2. torch numbers states group by group, each group in its list order. With the plain (FP32 /
   Float16) optimizer a group lists its parameters in model order. The DistributedOptimizer
   builds its groups from the DDP buffers, which lay parameters out in *reverse* model order
   (``_ParamAndGradBuffer``: ``for param in params[::-1]``), and its torch optimizer lists a
   group's fp32 parameters before its 16-bit ones (``shard_fp32_groups`` then
   ``shard_fp32_from_float16_groups``).

When some parameter's group is not decided by the saved flags, no numbering is claimed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

EMBEDDING_OR_OUTPUT = ("embedding.word_embeddings.weight", "output_layer.weight")
SIXTEEN_BIT = ("bfloat16", "float16")


@dataclass(frozen=True)
class Param:
    """A model parameter as the optimizer sees it."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Numbering:
    """``ids[name]`` and each group's id list, in torch's numbering."""

    ids: dict[str, int]
    groups: list[list[int]]


def no_weight_decay(name: str, shape: tuple[int, ...], args: dict[str, Any]) -> bool:
    """megatron-core's standard wd skip: biases and 1-D parameters."""
    skip = len(shape) == 1 or name.endswith(".bias")
    if args.get("apply_wd_to_qk_layernorm") is True:
        skip = skip and not ("q_layernorm." in name or "k_layernorm." in name)
    return skip


def is_expert(name: str) -> bool:
    return ".experts." in name


def _flags(p: Param, args: dict[str, Any]) -> tuple[float, bool, bool]:
    decoupled = args.get("decoupled_lr") is not None and p.name.endswith(EMBEDDING_OR_OUTPUT)
    wd = 0.0 if no_weight_decay(p.name, p.shape, args) else 1.0
    return wd, decoupled, is_expert(p.name)


def group_of(p: Param, groups: list[dict[str, Any]], args: dict[str, Any]) -> int | None:
    """The saved group whose ``wd_mult`` / ``is_decoupled_lr`` / ``is_expert_parallel`` are
    those megatron-core gives ``p``; None when not exactly one fits."""
    wd, decoupled, expert = _flags(p, args)
    fits = [
        i
        for i, g in enumerate(groups)
        if float(g.get("wd_mult", 1.0)) == wd
        and bool(g.get("is_decoupled_lr", False)) == decoupled
        and bool(g.get("is_expert_parallel", False)) == expert
    ]
    return fits[0] if len(fits) == 1 else None


def number_ids(
    params: list[Param], groups: list[dict[str, Any]], args: dict[str, Any], distributed: bool
) -> Numbering | None:
    """Torch's ids for ``params`` (in ``named_parameters()`` order) under megatron-core's
    groups; None when a parameter's group is not decided."""
    members: list[list[Param]] = [[] for _ in groups]
    for p in params:
        g = group_of(p, groups, args)
        if g is None:
            return None
        members[g].append(p)
    ids: dict[str, int] = {}
    out: list[list[int]] = []
    for group in members:
        if distributed:
            buffer_order = group[::-1]
            group = [p for p in buffer_order if p.dtype not in SIXTEEN_BIT]
            group += [p for p in buffer_order if p.dtype in SIXTEEN_BIT]
        out.append([])
        for p in group:
            ids[p.name] = len(ids)
            out[-1].append(ids[p.name])
    return Numbering(ids, out)


def file_order_agrees(first_seen: list[str], walk: list[str], key_of: dict[str, str]) -> bool:
    """Whether the saved keys' order in the file (``first_seen``: each key once) is the order
    in which ``walk`` (parameter names, in the order the optimizer's sharded state dict walks
    them: by id for the plain optimizer, in buffer order for the distributed one) first
    reaches each key."""
    expected: list[str] = []
    for name in walk:
        key = key_of.get(name)
        if key is not None and key not in expected:
            expected.append(key)
    return [k for k in first_seen if k in expected] == expected
