"""The logical model of a legacy Megatron checkpoint: tensor-parallel shards put back together,
pipeline stages joined with their layer numbers offset.

Each ``mp_rank_TT[_PPP]/model_optim_rng.pt`` holds its rank's ``model`` state_dict: the
shards of megatron-core's tensor-parallel layers (``tensor_parallel/layers.py``) and full
copies of everything else. How a parameter is split is decided by its module's name (the
layer class megatron-core's GPT / T5 / BERT specs put there), checked against the shapes on
every rank and, where ``args`` give them, against the global size the model must have:

- column-parallel (``ColumnParallelLinear``, ``VocabParallelEmbedding``: weight and bias split
  on dim 0): ``linear_qkv``, ``linear_fc1``, ``linear_q``, ``linear_kv``, ``word_embeddings``,
  ``output_layer``. With ``args.swiglu`` (gated MLP), each rank's ``linear_fc1`` holds its
  slice of the gate *and* of the up projection: the gate slices go first, then the up slices
  (megatron's own checkpoint converter joins them so), which is the layout of the unsplit
  model and of a dist checkpoint;
- row-parallel (``RowParallelLinear``: weight split on dim 1, bias whole on every rank):
  ``linear_proj``, ``linear_fc2``;
- replicated: norms (``*layernorm`` / ``*norm`` modules, Transformer Engine's fused
  ``layer_norm_weight`` / ``layer_norm_bias``), ``position_embeddings``, row-parallel biases.

A parameter no rule names is joined on the one dim where its shapes differ across ranks; when
they are all equal, rank 0's tensor is shown and the view says its split is not known.
Pipeline stages (``_PPP``; virtual-pipeline chunks ``model0``, ``model1``, ...) hold their own
layers numbered from 0: chunks are taken in the order megatron assigns layers (chunk by chunk,
stage by stage within a chunk) and each one's layer numbers are offset by the layers before it.
A merged record loads by concatenating its shards' tensors (each loaded lazily from its file).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ...types import TensorRecord, shape_numel

if TYPE_CHECKING:
    import torch

COLUMN = ("linear_qkv", "linear_fc1", "linear_q", "linear_kv", "word_embeddings", "output_layer")
ROW = ("linear_proj", "linear_fc2")
LAYER = re.compile(r"^(?P<head>(?:.+\.)?layers)\.(?P<index>\d+)\.")


@dataclass(frozen=True)
class Rule:
    """How one parameter is put together: ``dim`` to concatenate on (None: replicated),
    ``glu`` for a gated ``linear_fc1``, and why, in words."""

    dim: int | None
    why: str
    glu: bool = False


def _module(name: str) -> tuple[str, str]:
    parts = name.split(".")
    return (parts[-2] if len(parts) > 1 else ""), parts[-1]


def name_rule(name: str, args: dict[str, Any]) -> Rule | None:
    """The partition megatron-core's layer classes give ``name``; None for unknown names."""
    module, param = _module(name)
    if param.startswith("layer_norm_") or module.endswith("norm"):
        return Rule(None, f"replicated ({module}: a norm)")
    if module == "position_embeddings":
        return Rule(None, "replicated (position_embeddings)")
    if module in COLUMN:
        glu = module == "linear_fc1" and args.get("swiglu") is True
        if glu:
            why = f"column-parallel {module} (args.swiglu): gate halves, then up halves, on dim 0"
            return Rule(0, why, True)
        return Rule(0, f"column-parallel {module}: joined on dim 0")
    if module in ROW:
        if param == "bias":
            return Rule(None, f"replicated (row-parallel {module} bias)")
        return Rule(1, f"row-parallel {module}: joined on dim 1")
    return None


def global_shape(name: str, args: dict[str, Any]) -> tuple[int, ...] | None:
    """The unsplit shape ``args`` give a GPT parameter (None when they do not say)."""

    def num(key: str) -> int | None:
        v = args.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    h, nh, ffn, vocab = (
        num(k)
        for k in ("hidden_size", "num_attention_heads", "ffn_hidden_size", "padded_vocab_size")
    )
    if h is None or nh is None:
        return None
    kv = num("kv_channels") or h // nh
    ng = num("num_query_groups") if args.get("group_query_attention") else nh
    module, param = _module(name)
    if module in ("word_embeddings", "output_layer") and vocab:
        return (vocab, h)
    rows = {"linear_qkv": (nh + 2 * (ng or nh)) * kv}
    if ffn:
        rows["linear_fc1"] = ffn * (2 if args.get("swiglu") is True else 1)
    if module in rows and param in ("weight", "bias"):
        return (rows[module], h) if param == "weight" else (rows[module],)
    if module == "linear_proj" and param == "weight":
        return (h, nh * kv)
    if module == "linear_fc2" and param == "weight" and ffn:
        return (h, ffn)
    return None


def decide(name: str, shapes: list[tuple[int, ...]], args: dict[str, Any]) -> tuple[Rule, str]:
    """The rule for ``name`` given its shape on each tensor-parallel rank, and a problem
    ("" when none)."""
    if len(shapes) == 1:
        return Rule(None, "tp 1: whole"), ""
    rule = name_rule(name, args)
    want = global_shape(name, args)
    if rule is not None and rule.dim is not None:
        d = rule.dim
        ok = all(
            len(s) > d and s[:d] + s[d + 1 :] == shapes[0][:d] + shapes[0][d + 1 :] for s in shapes
        )
        merged = (*shapes[0][:d], sum(s[d] for s in shapes), *shapes[0][d + 1 :]) if ok else None
        if merged is not None and (want is None or merged == want):
            return replace(rule, why=rule.why + ("; = args' global shape" if want else "")), ""
        if want is not None and all(s == want for s in shapes):
            return Rule(None, f"replicated (each rank holds args' global shape {want})"), ""
        return rule, f"{name}: shapes {shapes} do not fit '{rule.why}'"
    if rule is not None:
        if all(s == shapes[0] for s in shapes):
            return rule, ""
        return rule, f"{name}: '{rule.why}' but the ranks' shapes differ: {shapes}"
    differ = [d for d in range(len(shapes[0])) if len({s[d] for s in shapes if len(s) > d}) > 1]
    if len(differ) == 1 and all(len(s) == len(shapes[0]) for s in shapes):
        return Rule(
            differ[0], f"unknown module: joined on dim {differ[0]}, where the shapes differ"
        ), ""
    return Rule(None, "split not known: rank 0's tensor shown"), (
        f"{name}: no rule names its split and its shapes are equal on every rank; "
        "rank 0's tensor is shown"
    )


def joined_record(records: list[TensorRecord], rule: Rule) -> TensorRecord:
    """One record for the shards ``records`` (tensor rank order) joined by ``rule``; rank 0's
    record when replicated. It loads lazily, each shard from its own file."""
    first = records[0]
    if rule.dim is None:
        return first
    shape = list(first.shape)
    shape[rule.dim] = sum(r.shape[rule.dim] for r in records)
    return TensorRecord(
        name=first.name,
        dtype=first.dtype,
        shape=tuple(shape),
        nbytes=shape_numel(tuple(shape)) * (first.nbytes // max(first.numel, 1)),
        file=first.file,
        offset=None,  # its bytes lie in several files
        read_values=_cat_read_values(records, rule),
    )


def _cat_read_values(records: list[TensorRecord], rule: Rule) -> Callable[[], torch.Tensor]:
    def load() -> torch.Tensor:
        import torch

        tensors = [r.read_values() for r in records if r.read_values is not None]
        if rule.glu:
            halves = [t.chunk(2, dim=0) for t in tensors]
            return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
        return torch.cat(tensors, dim=rule.dim or 0)

    return load


def merge_tp(
    shards: list[list[TensorRecord]], args: dict[str, Any]
) -> tuple[list[TensorRecord], dict[str, str], list[str]]:
    """One stage's records (``shards[t]``: tensor rank ``t``'s, in its order) put together:
    the merged records in rank 0's order, each name's rule, and the problems found."""
    by_rank = [{r.name: r for r in recs} for recs in shards]
    out: list[TensorRecord] = []
    rules: dict[str, str] = {}
    problems: list[str] = []
    for first in shards[0]:
        recs = [m.get(first.name) for m in by_rank]
        if any(r is None for r in recs):
            problems.append(f"{first.name}: not on every tensor-parallel rank; rank 0's shown")
            out.append(first)
            rules[first.name] = "missing on some ranks: rank 0's tensor shown"
            continue
        present = [r for r in recs if r is not None]
        rule, problem = decide(first.name, [tuple(r.shape) for r in present], args)
        if problem:
            problems.append(problem)
        rules[first.name] = rule.why
        out.append(joined_record(present, rule))
    return out, rules, problems


def layer_counts(records: list[TensorRecord]) -> dict[str, int]:
    """Per ``<head>.layers``, one past the highest layer index the records hold."""
    found: dict[str, int] = {}
    for r in records:
        m = LAYER.match(r.name)
        if m:
            found[m.group("head")] = max(found.get(m.group("head"), 0), int(m.group("index")) + 1)
    return found


def offset_layers(records: list[TensorRecord], offsets: dict[str, int]) -> list[TensorRecord]:
    """Records renamed with each ``<head>.layers.<i>`` moved to ``i + offsets[head]``."""
    if not any(offsets.values()):
        return records

    def rename(m: re.Match[str]) -> str:
        index = int(m.group("index")) + offsets.get(m.group("head"), 0)
        return f"{m.group('head')}.{index}."

    return [replace(r, name=LAYER.sub(rename, r.name, count=1)) for r in records]
