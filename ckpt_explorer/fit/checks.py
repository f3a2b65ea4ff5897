"""Divisibility and layout checks, each failing one naming the sizes that would work.

The rules restate ColossalAI 0.5.0 (ShardFormer policies, HybridParallelPlugin, VocabParallel
embeddings, PipelineStageManager); ``ok`` None means the files do not decide it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .arch import ArchFacts
from .layout import Layout

VOCAB_MULTIPLE = 64  # HybridParallelPlugin(make_vocab_size_divisible_by=64)
# model types whose policy splits lm_head with Linear1D_Col (no vocab padding)
UNPADDED_HEAD = frozenset({"qwen2", "mixtral", "deepseek"})
_ZERO_STAGES = {
    "hybrid": (0, 1, 2),
    "lowlevelzero": (1, 2),
    "gemini": (3,),
    "fsdp": (2, 3),
    "ddp": (0,),
}


@dataclass(frozen=True)
class Check:
    """One rule's outcome: ok True / False / None (unknown) and a message naming the numbers."""

    rule: str
    ok: bool | None
    message: str

    def to_json(self) -> dict[str, object]:
        return {"rule": self.rule, "ok": self.ok, "message": self.message}


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _sizes(values: list[int]) -> str:
    return "{" + ", ".join(map(str, values)) + "}"


def stage_split(layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage as ColossalAI's ``distribute_layers`` assigns them."""
    q, r = divmod(layers, pp)
    split = [q] * pp
    start = pp // 2 - r // 2
    for i in range(start, start + r):
        split[i] += 1
    return split


def padded_vocab(vocab: int, tp: int) -> int:
    multiple = VOCAB_MULTIPLE * tp
    return vocab if vocab % multiple == 0 else vocab + multiple - vocab % multiple


def _unknown(rule: str, what: str) -> Check:
    return Check(rule, None, f"{what} unknown (no config.json and not decidable from tensors)")


def _heads(a: ArchFacts, tp: int) -> list[Check]:
    out = []
    if a.heads is None:
        out.append(_unknown("attention_heads_tp", "attention heads"))
    else:
        ok = a.heads % tp == 0
        out.append(
            Check(
                "attention_heads_tp",
                ok,
                f"attention heads {a.heads} % tp {tp} = {a.heads % tp}"
                + ("" if ok else f"; tp ∈ {_sizes(divisors(a.heads))}"),
            )
        )
    if a.kv_heads is None:
        out.append(_unknown("kv_heads_tp", "KV heads"))
    elif a.kv_heads != a.heads or tp > a.kv_heads:
        ok = a.kv_heads % tp == 0 and a.kv_heads >= tp
        kind = "MQA" if a.kv_heads == 1 else "GQA" if a.kv_heads != a.heads else "MHA"
        out.append(
            Check(
                "kv_heads_tp",
                ok,
                f"KV heads {a.kv_heads} ({kind}) at tp {tp}: "
                + (
                    "divisible"
                    if ok
                    else "must be divisible by tp and not less than it; "
                    f"KV heads {a.kv_heads}: tp ∈ {_sizes(divisors(a.kv_heads))}"
                ),
            )
        )
    return out


def _vocab(a: ArchFacts, tp: int) -> Check:
    if a.vocab is None:
        return _unknown("vocab_tp", "vocab size")
    pad = padded_vocab(a.vocab, tp)
    if tp == 1 and pad == a.vocab:
        return Check("vocab_tp", True, f"vocab {a.vocab}: no padding at tp 1")
    return Check(
        "vocab_tp",
        True,
        f"vocab {a.vocab} padded to {pad} (multiple of {VOCAB_MULTIPLE} x tp {tp}), "
        f"{pad // tp} rows per rank, {pad - a.vocab} padding rows; booster.save_model "
        "strips them, per-rank shards gathered by other means carry them",
    )


def _lm_head(a: ArchFacts, tp: int) -> list[Check]:
    if a.model_type not in UNPADDED_HEAD or a.tied is True or a.vocab is None:
        return []
    ok = a.vocab % tp == 0
    return [
        Check(
            "lm_head_tp",
            ok,
            f"{a.model_type} lm_head is split unpadded: vocab {a.vocab} % tp {tp} = {a.vocab % tp}"
            + ("" if ok else f"; tp ∈ {_sizes(divisors(a.vocab)[:12])}"),
        )
    ]


def _intermediate(a: ArchFacts, tp: int) -> Check:
    if a.experts is not None:
        return Check(
            "intermediate_tp",
            True,
            f"MoE: HybridParallelPlugin leaves the {a.experts} experts whole at tp {tp} "
            "(split by ep instead)",
        )
    if a.intermediate is None:
        return _unknown("intermediate_tp", "intermediate size")
    ok = a.intermediate % tp == 0
    return Check(
        "intermediate_tp",
        ok,
        f"intermediate size {a.intermediate} % tp {tp} = {a.intermediate % tp}"
        + ("" if ok else f"; tp ∈ {_sizes(divisors(a.intermediate)[:12])}"),
    )


def _layers(a: ArchFacts, pp: int) -> Check:
    if a.layers is None:
        return _unknown("layers_pp", "layer count")
    split = stage_split(a.layers, pp)
    if a.layers < pp:  # ColossalAI 0.5.0 boosts this (measured): some stages hold no layer
        return Check(
            "layers_pp",
            True,
            f"{a.layers} layers over pp {pp}: {split}; stages without a decoder layer hold only "
            f"the embedding or head (boost accepts it; pp <= {a.layers} gives every stage a layer)",
        )
    even = len(set(split)) == 1
    note = "even" if even else "uneven (ColossalAI puts the extra layers in the middle stages)"
    return Check("layers_pp", True, f"{a.layers} layers over pp {pp}: {split}, {note}")


def _experts(a: ArchFacts, lay: Layout) -> list[Check]:
    if a.experts is None:
        if lay.ep > 1:
            return [Check("experts_ep", False, f"ep {lay.ep} but no MoE experts found")]
        return []
    ok = a.experts % lay.ep == 0
    msg = f"experts {a.experts} % ep {lay.ep} = {a.experts % lay.ep}"
    out = [Check("experts_ep", ok, msg + ("" if ok else f"; ep ∈ {_sizes(divisors(a.experts))}"))]
    if lay.ep > 1 and lay.dp and lay.dp % lay.ep:
        out.append(
            Check("dp_ep", False, f"data-parallel size {lay.dp} % ep {lay.ep} != 0 (MoE plugin)")
        )
    return out


def _tied(a: ArchFacts, pp: int) -> list[Check]:
    if pp == 1 or a.tied is False:
        return []
    if a.tied is None:
        return [
            Check(
                "tied_embeddings_pp",
                None,
                f"tied embeddings unknown at pp {pp}: if tied, the embedding lives on the "
                "first and last stage and is kept in sync",
            )
        ]
    return [
        Check(
            "tied_embeddings_pp",
            True,
            f"tied embeddings at pp {pp}: held on the first and last stage (counted on both), "
            "gradients all-reduced between them; the saved checkpoint keeps one copy",
        )
    ]


def _fused(a: ArchFacts, tp: int) -> list[Check]:
    if a.fused_qkv is None or tp == 1:
        return []
    ok = None if a.heads is None else a.heads % tp == 0
    sizes = f"; heads {a.heads}: tp ∈ {_sizes(divisors(a.heads))}" if a.heads and not ok else ""
    return [
        Check(
            "fused_qkv_tp",
            ok,
            f"fused qkv ({a.fused_qkv}): split per q/k/v and per head at tp {tp}; "
            "a checkpoint gathered from tp shards must be re-fused in the original order" + sizes,
        )
    ]


def _plugin(lay: Layout) -> list[Check]:
    out = []
    allowed = {"hybrid": "tp, pp, ep", "gemini": "tp", "lowlevelzero": "", "ddp": "", "fsdp": ""}
    bad = [
        f"{k} {v}"
        for k, v in (("tp", lay.tp), ("pp", lay.pp), ("ep", lay.ep))
        if v > 1 and k not in allowed[lay.plugin]
    ]
    out.append(
        Check(
            "plugin_layout",
            not bad,
            f"plugin {lay.plugin} supports {allowed[lay.plugin] or 'data parallel only'}"
            + (f"; not {', '.join(bad)}" if bad else ""),
        )
    )
    stages = _ZERO_STAGES[lay.plugin]
    ok = lay.stage in stages
    out.append(
        Check(
            "plugin_zero",
            ok,
            f"plugin {lay.plugin}, ZeRO stage {lay.stage}"
            + ("" if ok else f": stage ∈ {_sizes(list(stages))}"),
        )
    )
    if lay.stage and lay.dtype == "fp32" and lay.plugin == "hybrid":
        out.append(Check("zero_dtype", False, "HybridParallelPlugin ZeRO needs bf16 or fp16"))
    world, model = lay.world, lay.tp * lay.pp
    ok = world % model == 0
    out.append(
        Check(
            "world_size",
            ok,
            f"{world} GPUs = tp {lay.tp} x pp {lay.pp} x dp {lay.dp}"
            if ok
            else f"{world} GPUs % (tp {lay.tp} x pp {lay.pp}) = {world % model}",
        )
    )
    return out


def run_checks(a: ArchFacts, lay: Layout) -> list[Check]:
    """Every rule for ``lay``; the architecture rules only where the size is > 1."""
    out = _plugin(lay)
    if lay.tp > 1:
        out += _heads(a, lay.tp)
        out += [_intermediate(a, lay.tp)]
        out += _fused(a, lay.tp)
    if lay.plugin in ("hybrid", "gemini"):
        out.append(_vocab(a, lay.tp))
        if lay.tp > 1:
            out += _lm_head(a, lay.tp)
    if lay.pp > 1:
        out.append(_layers(a, lay.pp))
    out += _tied(a, lay.pp)
    out += _experts(a, lay)
    return out
