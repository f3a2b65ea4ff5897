"""A GGUF file as a conversion source: the Hugging Face model it was converted from.

Every tensor is given under its HF name, with llama.cpp's change undone (the Q/K head
permutation of the LLaMA family) and its values dequantized to float32 (F32/F16/BF16 keep
their type); a ``config.json`` is made from the GGUF's key/values. The HF names are those of
transformers' ``LlamaForCausalLM``, each checked against the ``gguf`` package's tensor name
map (the HF name must map back to the GGUF name); architectures other than ``llama`` are
refused with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import CkptExplorerError
from ..readers.gguf.hf import unpermute_qk
from ..view import CheckpointView
from .gguf_target import SUFFIXES, gguf_module
from .plan_types import PlannedTensor
from .source_content import SourceContent

if TYPE_CHECKING:
    import torch

LLAMA_NAMES = {  # gguf MODEL_TENSOR -> transformers LlamaForCausalLM name
    "TOKEN_EMBD": "model.embed_tokens.weight",
    "OUTPUT_NORM": "model.norm.weight",
    "OUTPUT": "lm_head.weight",
    "ATTN_NORM": "model.layers.{bid}.input_layernorm.weight",
    "ATTN_Q": "model.layers.{bid}.self_attn.q_proj.weight",
    "ATTN_K": "model.layers.{bid}.self_attn.k_proj.weight",
    "ATTN_V": "model.layers.{bid}.self_attn.v_proj.weight",
    "ATTN_OUT": "model.layers.{bid}.self_attn.o_proj.weight",
    "FFN_NORM": "model.layers.{bid}.post_attention_layernorm.weight",
    "FFN_GATE": "model.layers.{bid}.mlp.gate_proj.weight",
    "FFN_UP": "model.layers.{bid}.mlp.up_proj.weight",
    "FFN_DOWN": "model.layers.{bid}.mlp.down_proj.weight",
}
KEEP = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def _md(view: CheckpointView) -> dict[str, Any]:
    return {
        k.removeprefix("__metadata__."): v
        for k, v in view.values.items()
        if k.startswith("__metadata__.")
    }


def _int(md: dict[str, Any], key: str) -> int | None:
    v = md.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _refuse(view: CheckpointView, found: str) -> CkptExplorerError:
    return CkptExplorerError(
        view.path,
        "a llama-architecture GGUF to convert to Hugging Face names",
        found,
        "Only llama (Llama, Mistral, ...) GGUF files convert back to HF names so far.",
    )


def gguf_hf_source(view: CheckpointView) -> SourceContent:
    """The HF model a GGUF file holds (see the module docstring)."""
    gguf = gguf_module(view.path)
    md = _md(view)
    arch = md.get("general.architecture")
    if arch != "llama":
        raise _refuse(view, f"general.architecture {arch!r}")
    blocks = _int(md, "llama.block_count") or 0
    n_head = _int(md, "llama.attention.head_count")
    n_kv = _int(md, "llama.attention.head_count_kv") or n_head
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, blocks)
    hf_of: dict[str, tuple[str, int | None]] = {}  # GGUF name -> (HF name, heads to unpermute)
    for key, template in LLAMA_NAMES.items():
        tensor = getattr(gguf.MODEL_TENSOR, key)
        heads = n_head if key == "ATTN_Q" else n_kv if key == "ATTN_K" else None
        for bid in range(blocks) if "{bid}" in template else [None]:
            hf = template.format(bid=bid)
            name = gguf.TENSOR_NAMES[tensor].format(bid=bid) + ".weight"
            if tmap.get_name(hf, try_suffixes=SUFFIXES) != name:  # pragma: no cover - gguf drift
                raise _refuse(view, f"{hf} not mapped to {name} by the gguf package")
            hf_of[name] = (hf, heads)
    content = SourceContent("model", [])
    quantized: dict[str, int] = {}
    for record in view.tensors:
        if record.name not in hf_of:
            raise _refuse(view, f"a tensor {record.name} the llama names do not cover")
        hf, heads = hf_of[record.name]
        dtype = KEEP.get(record.dtype, "float32")
        n = 1
        for d in record.shape:
            n *= d
        content.tensors.append(
            PlannedTensor(
                name=hf,
                source=record.name + (f" (Q/K unpermuted, {heads} heads)" if heads else ""),
                dtype=dtype,
                shape=tuple(record.shape),
                nbytes=n * (4 if dtype == "float32" else 2),
                loader=_loader(view, record.name, heads, dtype),
            )
        )
        if dtype != record.dtype:
            quantized[record.dtype] = quantized.get(record.dtype, 0) + 1
    content.notes += [f"{n} {q} tensor(s) dequantized to float32" for q, n in quantized.items()]
    by_name = {t.name: t for t in content.tensors}
    embed = by_name.get("model.embed_tokens.weight")
    vocab = embed.shape[0] if embed is not None and embed.shape else None
    doc = llama_config(md, tied="lm_head.weight" not in by_name, vocab=vocab)
    content.written = [("config.json", doc)]
    return content


def _loader(
    view: CheckpointView, name: str, heads: int | None, dtype: str
) -> Callable[[], torch.Tensor]:
    def load() -> torch.Tensor:
        from ..io.mapped import torch_dtype

        t = view.load(name)
        if heads:
            t = unpermute_qk(t, heads)
        return t.to(torch_dtype(dtype)).contiguous()

    return load


def llama_config(md: dict[str, Any], tied: bool, vocab: int | None = None) -> dict[str, Any]:
    """The transformers ``LlamaConfig`` the GGUF key/values describe."""
    n_embd = _int(md, "llama.embedding_length")
    n_head = _int(md, "llama.attention.head_count")
    theta = md.get("llama.rope.freq_base", 10000.0)
    doc: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": n_embd,
        "intermediate_size": _int(md, "llama.feed_forward_length"),
        "num_hidden_layers": _int(md, "llama.block_count"),
        "num_attention_heads": n_head,
        "num_key_value_heads": _int(md, "llama.attention.head_count_kv") or n_head,
        "max_position_embeddings": _int(md, "llama.context_length"),
        "rms_norm_eps": md.get("llama.attention.layer_norm_rms_epsilon", 1e-6),
        "rope_theta": theta,
        "rope_parameters": {"rope_theta": theta, "rope_type": "default"},
        "vocab_size": _int(md, "llama.vocab_size") or vocab,
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
    }
    head_dim = _int(md, "llama.attention.key_length")
    if head_dim is None and n_embd and n_head:
        head_dim = n_embd // n_head
    doc["head_dim"] = head_dim
    for key in ("bos", "eos"):
        tid = _int(md, f"tokenizer.ggml.{key}_token_id")
        if tid is not None:
            doc[f"{key}_token_id"] = tid
    return {k: v for k, v in doc.items() if v is not None}
