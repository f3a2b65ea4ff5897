"""A GGUF file as a conversion source: the Hugging Face model it was converted from.

Each architecture of :data:`ARCHS` is one llama.cpp converts from a transformers class that
transformers also loads from GGUF: llama (Llama, Mistral; with ``expert_count``, Mixtral),
qwen2, qwen3, gemma2, gemma3 (text) and phi3. Every GGUF tensor is named by its architecture's HF template, and
each name is checked against the ``gguf`` package's tensor name map (the HF name must map
back to the GGUF name). llama.cpp's changes are undone by the same pairing the diff uses
(:func:`..readers.gguf.hf.pair_export`): the Q/K head permutation of the LLaMA family, the
``1 + w`` Gemma stores for its norms, a MoE layer's experts stacked into one tensor (split
back into one tensor per expert). Values are dequantized to float32 (F32/F16/BF16 keep their
type); a ``config.json`` is made from the GGUF's key/values. Other architectures, and a
tensor no template names, are refused with the reason.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import CkptExplorerError
from ..readers.gguf.hf import ExportSource, export_values, pair_export
from ..view import CheckpointView
from .gguf_target import gguf_module
from .plan_types import PlannedTensor
from .source_content import SourceContent

if TYPE_CHECKING:
    import torch

# gguf MODEL_TENSOR -> transformers module name ({bid}: the layer, {e}: the expert)
DECODER = {
    "TOKEN_EMBD": "model.embed_tokens",
    "OUTPUT_NORM": "model.norm",
    "OUTPUT": "lm_head",
    "ATTN_NORM": "model.layers.{bid}.input_layernorm",
    "ATTN_Q": "model.layers.{bid}.self_attn.q_proj",
    "ATTN_K": "model.layers.{bid}.self_attn.k_proj",
    "ATTN_V": "model.layers.{bid}.self_attn.v_proj",
    "ATTN_OUT": "model.layers.{bid}.self_attn.o_proj",
    "FFN_NORM": "model.layers.{bid}.post_attention_layernorm",
    "FFN_GATE": "model.layers.{bid}.mlp.gate_proj",
    "FFN_UP": "model.layers.{bid}.mlp.up_proj",
    "FFN_DOWN": "model.layers.{bid}.mlp.down_proj",
}
MIXTRAL = {
    **{k: v for k, v in DECODER.items() if not k.startswith(("FFN_GATE", "FFN_UP", "FFN_DOWN"))},
    "FFN_GATE_INP": "model.layers.{bid}.block_sparse_moe.gate",
    "FFN_GATE_EXP": "model.layers.{bid}.block_sparse_moe.experts.{e}.w1",
    "FFN_DOWN_EXP": "model.layers.{bid}.block_sparse_moe.experts.{e}.w2",
    "FFN_UP_EXP": "model.layers.{bid}.block_sparse_moe.experts.{e}.w3",
}
QWEN3 = {
    **DECODER,
    "ATTN_Q_NORM": "model.layers.{bid}.self_attn.q_norm",
    "ATTN_K_NORM": "model.layers.{bid}.self_attn.k_norm",
}
GEMMA2 = {
    **{k: v for k, v in DECODER.items() if k not in ("OUTPUT", "FFN_NORM")},
    "ATTN_POST_NORM": "model.layers.{bid}.post_attention_layernorm",
    "FFN_PRE_NORM": "model.layers.{bid}.pre_feedforward_layernorm",
    "FFN_POST_NORM": "model.layers.{bid}.post_feedforward_layernorm",
}
GEMMA3 = {
    **GEMMA2,
    "ATTN_Q_NORM": "model.layers.{bid}.self_attn.q_norm",
    "ATTN_K_NORM": "model.layers.{bid}.self_attn.k_norm",
}
PHI3 = {  # q/k/v and gate/up stay fused, as transformers' Phi3 keeps them
    **{k: v for k, v in DECODER.items() if k not in ("ATTN_Q", "ATTN_K", "ATTN_V", "FFN_GATE")},
    "ATTN_QKV": "model.layers.{bid}.self_attn.qkv_proj",
    "FFN_UP": "model.layers.{bid}.mlp.gate_up_proj",
}
KEEP = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}
WIDTH = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class Arch:
    """One HF class a GGUF architecture converts back to."""

    hf_class: str
    model_type: str
    names: dict[str, str]
    config: Callable[[dict[str, Any], str], dict[str, Any]] = field(default=lambda md, a: {})


def _int(md: dict[str, Any], key: str) -> int | None:
    v = md.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _float(md: dict[str, Any], key: str, default: float | None = None) -> float | None:
    """A float key/value; a float32 one as the shortest decimal of that float32 (GGUF's
    ``1e-06`` reads back as 9.99999997e-07 in float64)."""
    v = md.get(key, default)
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    v = float(v)
    single = struct.Struct("<f")
    try:
        if single.unpack(single.pack(v))[0] != v:
            return v
    except OverflowError:
        return v
    for digits in range(1, 10):
        short = float(f"{v:.{digits}g}")
        if single.unpack(single.pack(short))[0] == v:
            return short
    return v  # pragma: no cover - 9 digits always round-trip


def _mixtral_config(md: dict[str, Any], arch: str) -> dict[str, Any]:
    return {
        "num_local_experts": _int(md, f"{arch}.expert_count"),
        "num_experts_per_tok": _int(md, f"{arch}.expert_used_count"),
    }


def _query_scalar(md: dict[str, Any], arch: str, layers_27b: int) -> int | None:
    """Gemma's query scale is not in the file: llama.cpp uses 1/sqrt(head_dim), except for
    the 27B model (told by its layer count), which uses 1/sqrt(hidden / heads)."""
    n_embd, n_head = _int(md, f"{arch}.embedding_length"), _int(md, f"{arch}.attention.head_count")
    if _int(md, f"{arch}.block_count") == layers_27b and n_embd and n_head:
        return n_embd // n_head
    return _int(md, f"{arch}.attention.key_length")


def _gemma2_config(md: dict[str, Any], arch: str) -> dict[str, Any]:
    return {
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": _query_scalar(md, arch, 46),
        "attn_logit_softcapping": _float(md, f"{arch}.attn_logit_softcapping"),
        "final_logit_softcapping": _float(md, f"{arch}.final_logit_softcapping"),
        "sliding_window": _int(md, f"{arch}.attention.sliding_window"),
    }


def _gemma3_config(md: dict[str, Any], arch: str) -> dict[str, Any]:
    """Gemma 3 (text): two rope bases, local layers in llama.cpp's fixed pattern of 6 (the
    config's default too). A scaled rope (the 4B-27B models) is not written back: refused."""
    scaling = md.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise ValueError(f"{arch}.rope.scaling.type {scaling!r} (only unscaled rope converts)")
    full = _float(md, f"{arch}.rope.freq_base", 1_000_000.0)
    local = _float(md, f"{arch}.rope.freq_base_swa", 10000.0)
    return {
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": _query_scalar(md, arch, 62),
        "final_logit_softcapping": _float(md, f"{arch}.final_logit_softcapping"),
        "sliding_window": _int(md, f"{arch}.attention.sliding_window"),
        "rope_theta": full,
        "rope_parameters": {
            "full_attention": {"rope_theta": full, "rope_type": "default"},
            "sliding_attention": {"rope_theta": local, "rope_type": "default"},
        },
    }


def _phi3_config(md: dict[str, Any], arch: str) -> dict[str, Any]:
    """Phi-3's extras: the rotary share of a head, the original context, the window (0: none).
    LongRoPE factors are tensors (``rope_factors_long``) that no template names: refused."""
    n_embd, n_head = _int(md, f"{arch}.embedding_length"), _int(md, f"{arch}.attention.head_count")
    rope_dims = _int(md, f"{arch}.rope.dimension_count")
    share = rope_dims / (n_embd // n_head) if rope_dims and n_embd and n_head else 1.0
    theta = _float(md, f"{arch}.rope.freq_base", 10000.0)
    window = _int(md, f"{arch}.attention.sliding_window")
    return {
        "original_max_position_embeddings": _int(
            md, f"{arch}.rope.scaling.original_context_length"
        ),
        "partial_rotary_factor": share,
        "rope_parameters": {
            "rope_theta": theta,
            "rope_type": "default",
            "partial_rotary_factor": share,
        },
        "sliding_window": window or None,
    }


ARCHS = {
    "llama": Arch("LlamaForCausalLM", "llama", DECODER),
    "mixtral": Arch("MixtralForCausalLM", "mixtral", MIXTRAL, _mixtral_config),
    "qwen2": Arch("Qwen2ForCausalLM", "qwen2", DECODER),
    "qwen3": Arch("Qwen3ForCausalLM", "qwen3", QWEN3),
    "gemma2": Arch("Gemma2ForCausalLM", "gemma2", GEMMA2, _gemma2_config),
    "gemma3": Arch("Gemma3ForCausalLM", "gemma3_text", GEMMA3, _gemma3_config),
    "phi3": Arch("Phi3ForCausalLM", "phi3", PHI3, _phi3_config),
}


def _md(view: CheckpointView) -> dict[str, Any]:
    return {
        k.removeprefix("__metadata__."): v
        for k, v in view.values.items()
        if k.startswith("__metadata__.")
    }


def _refuse(view: CheckpointView, found: str) -> CkptExplorerError:
    return CkptExplorerError(
        view.path,
        "a GGUF of an architecture that converts back to Hugging Face names",
        found,
        f"GGUF -> HF knows {', '.join(sorted(ARCHS))} (llama with experts: Mixtral) so far.",
    )


def arch_of(md: dict[str, Any]) -> str | None:
    """The :data:`ARCHS` key of a GGUF's key/values (a llama with experts is Mixtral)."""
    arch = md.get("general.architecture")
    if arch == "llama" and (_int(md, "llama.expert_count") or 0) > 0:
        return "mixtral"
    return arch if isinstance(arch, str) and arch in ARCHS else None


def hf_names(view: CheckpointView, spec: Arch, gguf: Any, blocks: int) -> dict[str, str]:
    """HF name -> GGUF tensor, for every tensor of ``view`` (a stacked expert tensor: one HF
    name per expert)."""
    by_base: dict[str, str] = {}
    for key, template in spec.names.items():
        pattern = gguf.TENSOR_NAMES[getattr(gguf.MODEL_TENSOR, key)]
        for bid in range(blocks) if "{bid}" in template else [0]:
            by_base[pattern.format(bid=bid)] = template.replace("{bid}", str(bid))
    names: dict[str, str] = {}
    for record in view.tensors:
        base, _, suffix = record.name.rpartition(".")
        hf = by_base.get(base)
        if hf is None or suffix not in ("weight", "bias"):
            raise _refuse(view, f"a tensor {record.name} the {spec.model_type} names do not cover")
        if "{e}" in hf:
            experts = record.shape[0] if record.shape else 0
            names.update((f"{hf.format(e=e)}.{suffix}", record.name) for e in range(experts))
        else:
            names[f"{hf}.{suffix}"] = record.name
    return names


def gguf_hf_source(view: CheckpointView) -> SourceContent:
    """The HF model a GGUF file holds (see the module docstring)."""
    gguf = gguf_module(view.path)
    md = _md(view)
    key = arch_of(md)
    if key is None:
        raise _refuse(view, f"general.architecture {md.get('general.architecture')!r}")
    spec, arch = ARCHS[key], str(md["general.architecture"])
    names = hf_names(view, spec, gguf, _int(md, f"{arch}.block_count") or 0)
    pairing = pair_export(view, list(names), {})
    for hf, name in names.items():  # the gguf name map must agree with the templates
        src = pairing.sources.get(hf)
        if src is None or src.gguf != name:  # pragma: no cover - gguf name map drift
            why = pairing.only_hf.get(hf) or f"the gguf name map gives {src and src.gguf}"
            raise _refuse(view, f"{hf} is not paired with {name}: {why}")
    content = SourceContent("model", [])
    dtypes = {r.name: r.dtype for r in view.tensors}
    quantized: dict[str, int] = {}
    for hf in names:
        src = pairing.sources[hf]
        stored = dtypes[src.gguf]
        dtype = KEEP.get(stored, "float32")
        shape = tuple(view.record(src.gguf).shape)[1 if src.expert is not None else 0 :]
        n = 1
        for d in shape:
            n *= d
        content.tensors.append(
            PlannedTensor(
                name=hf,
                source=src.describe(),
                dtype=dtype,
                shape=shape,
                nbytes=n * WIDTH[dtype],
                read_values=_read_values(view, src, dtype),
            )
        )
        if dtype != stored and src.expert in (None, 0):
            quantized[stored] = quantized.get(stored, 0) + 1
    content.notes += [f"{n} {q} tensor(s) dequantized to float32" for q, n in quantized.items()]
    embed = next((t for t in content.tensors if t.name == "model.embed_tokens.weight"), None)
    vocab = embed.shape[0] if embed is not None and embed.shape else None
    tied = "lm_head.weight" not in names
    try:
        doc = hf_config(md, spec, arch, tied=tied, vocab=vocab)
    except ValueError as e:
        raise _refuse(view, str(e)) from e
    content.written = [("config.json", doc)]
    return content


def _read_values(view: CheckpointView, src: ExportSource, dtype: str) -> Callable[[], torch.Tensor]:
    def load() -> torch.Tensor:
        from ..io.mapped import torch_dtype

        t = export_values(view, src)
        if src.inverse is not None:
            t = src.inverse(t)
        return t.to(torch_dtype(dtype)).contiguous()

    return load


def hf_config(
    md: dict[str, Any], spec: Arch, arch: str, tied: bool, vocab: int | None = None
) -> dict[str, Any]:
    """The transformers config the GGUF key/values describe (``arch``: the GGUF's
    ``general.architecture``, the prefix of its keys)."""
    n_embd = _int(md, f"{arch}.embedding_length")
    n_head = _int(md, f"{arch}.attention.head_count")
    theta = _float(md, f"{arch}.rope.freq_base", 10000.0)
    doc: dict[str, Any] = {
        "architectures": [spec.hf_class],
        "model_type": spec.model_type,
        "hidden_size": n_embd,
        "intermediate_size": _int(md, f"{arch}.feed_forward_length"),
        "num_hidden_layers": _int(md, f"{arch}.block_count"),
        "num_attention_heads": n_head,
        "num_key_value_heads": _int(md, f"{arch}.attention.head_count_kv") or n_head,
        "max_position_embeddings": _int(md, f"{arch}.context_length"),
        "rms_norm_eps": _float(md, f"{arch}.attention.layer_norm_rms_epsilon", 1e-6),
        "rope_theta": theta,
        "rope_parameters": {"rope_theta": theta, "rope_type": "default"},
        "vocab_size": _int(md, f"{arch}.vocab_size") or vocab,
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
    }
    head_dim = _int(md, f"{arch}.attention.key_length")
    if head_dim is None and n_embd and n_head:
        head_dim = n_embd // n_head
    doc["head_dim"] = head_dim
    doc.update(spec.config(md, arch))
    for key, gguf_key in (("bos", "bos"), ("eos", "eos"), ("pad", "padding")):
        tid = _int(md, f"tokenizer.ggml.{gguf_key}_token_id")
        if tid is not None:
            doc[f"{key}_token_id"] = tid
    return {k: v for k, v in doc.items() if v is not None}


def llama_config(md: dict[str, Any], tied: bool, vocab: int | None = None) -> dict[str, Any]:
    """The transformers ``LlamaConfig`` the GGUF key/values of a llama describe."""
    return hf_config(md, ARCHS["llama"], "llama", tied, vocab)
