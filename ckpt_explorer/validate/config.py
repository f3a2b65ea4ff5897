"""The model against its ``config.json``: vocab, layers, hidden size, dtype, tied weights.

Only HF-style configs are read (no transformers import): ``vocab_size``,
``num_hidden_layers``/``n_layer``/``num_layers``, ``hidden_size``/``n_embd``/``d_model``,
``torch_dtype`` (transformers 4) or ``dtype`` (transformers 5), ``tie_word_embeddings``.
Transformers 5 leaves a tied ``lm_head.weight`` out of the files; transformers 4 ``.bin``
keeps it sharing the embedding's storage; both are clean.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from collections.abc import Sequence
from itertools import compress, repeat
from typing import Any

from ..record_table import record_column
from ..types import TensorRecord
from .findings import Finding
from .parts import ModelPart, is_float

EMBED_SUFFIXES = (
    "embed_tokens.weight",
    "wte.weight",
    "word_embeddings.weight",
    "embed_in.weight",
    "shared.weight",
    "tok_embeddings.weight",
)
HEAD_SUFFIXES = ("lm_head.weight",)
CAUSAL_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model", "dim")
STACK = re.compile(r"^(.*?(?:^|\.)(?:layers|h|layer|blocks|block))\.(\d+)\.")
_GROUPS = operator.methodcaller("groups")


def _first(config: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, Any] | None:
    for k in keys:
        if isinstance(config.get(k), int) and not isinstance(config.get(k), bool):
            return k, config[k]
    return None


def _find(records: Sequence[TensorRecord], suffixes: tuple[str, ...]) -> TensorRecord | None:
    names = record_column(records, "name")
    # a name equal to a suffix or ending in "." + it ends with it: one C-level pass picks the
    # few candidates (a listing's records are made only when asked for)
    hits = list(compress(range(len(names)), map(str.endswith, names, repeat(suffixes))))
    for suffix in suffixes:
        for i in hits:
            if names[i] == suffix or names[i].endswith("." + suffix):
                return records[i]
    return None


def input_embedding(records: Sequence[TensorRecord]) -> TensorRecord | None:
    """The model's input embedding (its rows are the token ids it can take), if named so."""
    return _find(records, EMBED_SUFFIXES)


def check_model(model: ModelPart) -> list[Finding]:
    """Every config rule for one model (nothing when it has no config.json)."""
    config = model.config
    if not config:
        return []
    findings: list[Finding] = []
    records = model.records
    embed = _find(records, EMBED_SUFFIXES)
    head = _find(records, HEAD_SUFFIXES)
    findings += _vocab(model, config, [r for r in (embed, head) if r is not None])
    findings += _layers(model, config)
    findings += _hidden(model, config, embed)
    findings += _dtype(model, config)
    findings += _tied(model, config, embed, head)
    return findings


def _vocab(model: ModelPart, config: dict[str, Any], found: list[TensorRecord]) -> list[Finding]:
    vocab = config.get("vocab_size")
    if not isinstance(vocab, int) or isinstance(vocab, bool):
        return []
    out = []
    for r in found:
        if len(r.shape) != 2 or r.shape[0] == vocab:
            continue
        padded = r.shape[0] > vocab
        out.append(
            Finding(
                "config.vocab_padding" if padded else "config.vocab_size",
                "error",
                f"{r.name} has {r.shape[0]} rows but config.json says vocab_size {vocab}"
                + (" — vocab padding left in" if padded else ""),
                (
                    f"Slice the padding off ([:{vocab}]) before saving (from_pretrained fails "
                    "with a size mismatch), or set vocab_size if the rows are real tokens."
                    if padded
                    else "The tensor is smaller than the vocabulary; the checkpoint and its "
                    "config come from different models."
                ),
                tensor=model.display(r.name),
                file=model.label + r.file,
            )
        )
    return out


def _first_missing(indices: set[int], expected: int, limit: int = 13) -> list[int]:
    """The first ``limit`` of ``0..expected-1`` not in ``indices``, by one walk of the present
    ones (never a set as large as the count a config.json may claim)."""
    out: list[int] = []
    i = 0
    for present in sorted(j for j in indices if 0 <= j < expected):
        while i < present and len(out) < limit:
            out.append(i)
            i += 1
        if len(out) >= limit:
            return out
        i = present + 1
    while i < expected and len(out) < limit:
        out.append(i)
        i += 1
    return out


def _layers(model: ModelPart, config: dict[str, Any]) -> list[Finding]:
    found = _first(config, LAYER_KEYS)
    if found is None:
        return []
    key, expected = found
    stacks: dict[str, set[int]] = {}
    matches = filter(None, map(STACK.match, record_column(model.records, "name")))
    for stack, index in dict.fromkeys(map(_GROUPS, matches)):  # each (stack, layer) once
        stacks.setdefault(stack, set()).add(int(index))
    if "decoder" in " ".join(stacks) and "encoder" in " ".join(stacks):
        return []  # encoder-decoder: per-stack counts live under other keys
    out = []
    for stack, indices in stacks.items():
        missing = _first_missing(indices, expected)
        beyond = sorted(i for i in indices if i >= expected)
        if len(stacks) > 1 and beyond:
            continue  # another tower (vision, audio) with its own config
        if missing:
            shown = ", ".join(map(str, missing[:12])) + (" …" if len(missing) > 12 else "")
            # missing holds the first 13 only: config.json's count never sizes an allocation
            out.append(
                Finding(
                    "config.missing_layers",
                    "error",
                    f"{stack} has {len(indices)} of the {expected} layers config.json {key} "
                    f"says; missing {shown}",
                    "The save lost layers (a pipeline stage or shard not written or not "
                    "gathered); re-save from the training run.",
                    tensor=model.display(f"{stack}.{missing[0]}"),
                )
            )
        if beyond:
            out.append(
                Finding(
                    "config.extra_layers",
                    "error",
                    f"{stack} has layer(s) {', '.join(map(str, beyond[:12]))} beyond the "
                    f"{expected} config.json {key} says",
                    "The config belongs to a smaller model; fix num_hidden_layers or the config.",
                    tensor=model.display(f"{stack}.{beyond[0]}"),
                )
            )
    return out


def _hidden(model: ModelPart, config: dict[str, Any], embed: TensorRecord | None) -> list[Finding]:
    found = _first(config, HIDDEN_KEYS)
    if found is None or embed is None or len(embed.shape) != 2:
        return []
    key, hidden = found
    if embed.shape[1] == hidden:
        return []
    return [
        Finding(
            "config.hidden_size",
            "error",
            f"{embed.name} has width {embed.shape[1]} but config.json {key} is {hidden}",
            "The config and the weights come from different models.",
            tensor=model.display(embed.name),
        )
    ]


def _dtype(model: ModelPart, config: dict[str, Any]) -> list[Finding]:
    declared = config.get("torch_dtype", config.get("dtype"))
    key = "torch_dtype" if "torch_dtype" in config else "dtype"
    if not isinstance(declared, str) or declared == "auto":
        return []
    declared = declared.removeprefix("torch.")
    by_bytes: Counter[str] = Counter()
    dtypes, nbytes = record_column(model.records, "dtype"), record_column(model.records, "nbytes")
    for dtype in dict.fromkeys(dtypes):  # in order of first appearance, as a walk adds them
        if is_float(dtype):
            by_bytes[dtype] = sum(compress(nbytes, map(operator.eq, dtypes, repeat(dtype))))
    if not by_bytes:
        return []
    main, _ = by_bytes.most_common(1)[0]
    if main == declared:
        return []
    share = by_bytes[main] / sum(by_bytes.values())
    return [
        Finding(
            "config.dtype",
            "warning",
            f"config.json {key} is {declared} but {share:.0%} of the floating-point bytes are "
            f"{main}",
            f'from_pretrained(dtype="auto") would load {declared}; set {key} to {main} or '
            "cast the weights.",
            file=model.label + "config.json",
        )
    ]


def _same_values(model: ModelPart, a: TensorRecord, b: TensorRecord) -> bool | None:
    if a.storage_key is not None and (a.storage_key, a.file, a.offset) == (
        b.storage_key,
        b.file,
        b.offset,
    ):
        return True
    if a.shape != b.shape:
        return False
    from ..io.raw_values import records_equal

    same = records_equal(a, b)  # from the files' bytes where they are plain: no torch
    if same is not None:
        return same
    try:
        import torch

        return bool(torch.equal(model.view.load(a.name), model.view.load(b.name)))
    except Exception:
        return None


def _tied(
    model: ModelPart,
    config: dict[str, Any],
    embed: TensorRecord | None,
    head: TensorRecord | None,
) -> list[Finding]:
    tie = config.get("tie_word_embeddings")
    if not isinstance(tie, bool) or embed is None:
        return []
    if tie and head is not None:
        same = _same_values(model, embed, head)
        if same is False:
            return [
                Finding(
                    "tied.lm_head_differs",
                    "error",
                    f"tie_word_embeddings is true but {head.name} differs from {embed.name}",
                    "transformers 4 ties them and silently drops one (transformers 5 keeps "
                    "both and warns); set tie_word_embeddings false, or save one tensor.",
                    tensor=model.display(head.name),
                )
            ]
        return []
    archs = config.get("architectures") or []
    causal = any(str(a).endswith(CAUSAL_HEADS) for a in archs)
    if not tie and head is None and causal:
        return [
            Finding(
                "tied.lm_head_missing",
                "error",
                f"tie_word_embeddings is false but no lm_head.weight is stored (only {embed.name})",
                "from_pretrained would initialise lm_head randomly; save lm_head.weight or set "
                "tie_word_embeddings true.",
                tensor=model.display("lm_head.weight"),
            )
        ]
    if not tie and head is not None and _same_values(model, embed, head):
        return [
            Finding(
                "tied.untied_but_equal",
                "info",
                f"tie_word_embeddings is false but {head.name} equals {embed.name}",
                "Fine if the heads were trained tied; set tie_word_embeddings true to save space.",
                tensor=model.display(head.name),
            )
        ]
    return []
