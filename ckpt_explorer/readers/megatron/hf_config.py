"""Which Hugging Face model a Megatron ``GPTModel`` is, decided from its saved ``args`` alone.

Two shapes of megatron-core's ``GPTModel`` have an exact HF twin:

- Llama-style: ``swiglu``, ``normalization`` RMSNorm, ``position_embedding_type`` rope, no
  biases -> ``LlamaForCausalLM`` (GQA through ``num_query_groups``, ``head_dim`` =
  ``kv_channels``, ``rope_theta`` = ``rotary_base``);
- GPT-style: GELU MLP, LayerNorm, learned absolute positions, biases on every linear, plain
  multi-head attention -> ``GPT2LMHeadModel``. ``activation_function`` is "gelu" for
  megatron-core's exact ``F.gelu``, "gelu_new" where ``bias_gelu_fusion`` ran its fused
  kernel (the tanh approximation).

Anything else fails closed with a :class:`CkptExplorerError` that names the argument and its
value: a flag that changes the maths set (MoE, MLA, QK layernorm, partial or scaled RoPE, ...),
or a required argument missing. An absent flag counts as off. Megatron-LM adds each flag with
the old behaviour as its default, so the args of an older run simply lack it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import CkptExplorerError
from ...io.location import Location

LLAMA, GPT2 = "LlamaForCausalLM", "GPT2LMHeadModel"
# args flag -> (values that mean "off", what the flag turns on); checked for every model
OFF: tuple[tuple[str, tuple[Any, ...], str], ...] = (
    ("num_experts", (None, 0), "mixture of experts"),
    ("multi_latent_attention", (None, False), "multi-latent attention"),
    ("qk_layernorm", (None, False), "QK layernorm"),
    ("apply_layernorm_1p", (None, False), "zero-centred norm weights (weight + 1)"),
    ("apply_residual_connection_post_layernorm", (None, False), "post-norm residuals"),
    ("squared_relu", (None, False), "a squared-ReLU MLP"),
    ("quick_geglu", (None, False), "a quick-GeGLU MLP"),
    ("openai_gelu", (None, False), "OpenAI's GELU (legacy Megatron models)"),
    ("use_te_activation_func", (None, False), "Transformer Engine's activation functions"),
    ("glu_linear_offset", (None, 0, 0.0), "an offset in the GLU"),
    ("activation_func_clamp_value", (None,), "clamped activations"),
    ("softmax_type", (None, "vanilla"), "an attention softmax with offsets"),
    ("window_size", (None,), "sliding-window attention"),
    ("mtp_num_layers", (None, 0), "multi-token prediction layers"),
    ("heterogeneous_layers_config_path", (None,), "heterogeneous layers"),
    ("is_hybrid_model", (None, False), "a hybrid (Mamba) model"),
)
# checked where the positions are RoPE
ROPE_OFF: tuple[tuple[str, tuple[Any, ...], str], ...] = (
    ("rotary_percent", (None, 1, 1.0), "partial RoPE"),
    ("rotary_interleaved", (None, False), "interleaved RoPE"),
    ("use_rope_scaling", (None, False), "Llama 3 RoPE scaling"),
    ("rotary_seq_len_interpolation_factor", (None, 1), "RoPE position interpolation"),
    ("mrope_section", (None,), "multimodal RoPE"),
    ("no_rope_freq", (None,), "layers without RoPE"),
)
HINT = (
    "Supported: Llama-style (swiglu, RMSNorm, rope, no biases) -> LlamaForCausalLM and "
    "GPT-style (GELU, LayerNorm, learned_absolute, biases, no GQA) -> GPT2LMHeadModel; convert "
    "other models with --to safetensors --model-only (Megatron's own names)."
)


@dataclass(frozen=True)
class HfSpec:
    """The HF model a Megatron model is: its class and the sizes its tensors must have."""

    architecture: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    groups: int
    head_dim: int
    vocab: int | None  # args.padded_vocab_size, when saved
    positions: int
    epsilon: float
    tied: bool
    activation: str
    rope_theta: float | None
    dropout: tuple[float | None, float | None]  # hidden, attention
    notes: tuple[str, ...]

    @property
    def swiglu(self) -> bool:
        return self.architecture == LLAMA

    def config(self, vocab: int, dtype: str) -> dict[str, Any]:
        """``config.json`` for ``vocab`` rows of word embeddings stored in ``dtype``.

        The keys are those transformers 4.x reads (``torch_dtype``, ``rope_theta``); 5.x reads
        them too."""
        head: dict[str, Any] = {"architectures": [self.architecture]}
        if self.architecture == LLAMA:
            body: dict[str, Any] = {
                "model_type": "llama",
                "vocab_size": vocab,
                "hidden_size": self.hidden,
                "intermediate_size": self.ffn,
                "num_hidden_layers": self.layers,
                "num_attention_heads": self.heads,
                "num_key_value_heads": self.groups,
                "head_dim": self.head_dim,
                "hidden_act": "silu",
                "max_position_embeddings": self.positions,
                "rms_norm_eps": self.epsilon,
                "rope_theta": self.rope_theta,
                "attention_bias": False,
                "mlp_bias": False,
            }
        else:
            hidden, attention = self.dropout
            body = {
                "model_type": "gpt2",
                "vocab_size": vocab,
                "n_positions": self.positions,
                "n_embd": self.hidden,
                "n_layer": self.layers,
                "n_head": self.heads,
                "n_inner": self.ffn,
                "activation_function": self.activation,
                "layer_norm_epsilon": self.epsilon,
                "scale_attn_weights": True,
                "scale_attn_by_inverse_layer_idx": False,
                "reorder_and_upcast_attn": False,
            }
            if hidden is not None:
                body.update(resid_pdrop=hidden, embd_pdrop=hidden)
            if attention is not None:
                body["attn_pdrop"] = attention
        tokens = {"bos_token_id": None, "eos_token_id": None}  # the tokenizer's, not saved
        return {**head, **body, **tokens, "tie_word_embeddings": self.tied, "torch_dtype": dtype}


def _need_int(args: Mapping[str, Any], name: str, where: Location) -> int:
    value = args.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CkptExplorerError(
            where,
            f"args.{name} (a positive int) to build the HF model",
            "none saved" if value is None else repr(value),
            HINT,
        )
    return value


def _flag(args: Mapping[str, Any], name: str, absent: bool, where: Location) -> bool:
    value = args.get(name, absent)
    if not isinstance(value, bool):
        raise CkptExplorerError(where, f"args.{name} True or False", repr(value), HINT)
    return value


def _check_off(
    args: Mapping[str, Any], flags: tuple[tuple[str, tuple[Any, ...], str], ...], where: Location
) -> None:
    for name, off, what in flags:
        value = args.get(name)
        if not any(value is v or (type(value) is type(v) and value == v) for v in off):
            raise CkptExplorerError(
                where,
                f"a model without {what} (args.{name} off) to convert to HF",
                f"args.{name} = {value!r:.80}",
                HINT,
            )


def _epsilon(args: Mapping[str, Any], where: Location) -> float:
    for name in ("norm_epsilon", "layernorm_epsilon"):  # the name before Megatron-LM 0.5
        value = args.get(name)
        if isinstance(value, float | int) and not isinstance(value, bool) and value > 0:
            return float(value)
    raise CkptExplorerError(
        where,
        "args.norm_epsilon (or layernorm_epsilon): the norms' epsilon",
        "neither saved",
        "The epsilon is part of the model; an args without it is not Megatron-LM's.",
    )


def hf_spec(args: Mapping[str, Any], where: Location) -> HfSpec:
    """The HF twin of a Megatron model with these ``args`` (see the module docstring).

    Raises:
        CkptExplorerError: the args are missing something the model needs, or describe a
            model neither LlamaForCausalLM nor GPT2LMHeadModel computes exactly.
    """
    layers, hidden = _need_int(args, "num_layers", where), _need_int(args, "hidden_size", where)
    heads, ffn = (
        _need_int(args, "num_attention_heads", where),
        _need_int(args, "ffn_hidden_size", where),
    )
    _check_off(args, OFF, where)
    notes: list[str] = []
    gqa = _flag(args, "group_query_attention", False, where)
    groups = _need_int(args, "num_query_groups", where) if gqa else heads
    head_dim = args.get("kv_channels") or hidden // heads
    if not isinstance(head_dim, int) or heads % groups:
        raise CkptExplorerError(
            where,
            "kv_channels an int, num_query_groups dividing the heads",
            f"{head_dim!r}, {groups}",
        )
    swiglu = _flag(args, "swiglu", False, where)
    norm = args.get("normalization", "LayerNorm")
    position = args.get("position_embedding_type")
    if position is None and isinstance(args.get("use_rotary_position_embeddings"), bool):
        position = "rope" if args["use_rotary_position_embeddings"] else "learned_absolute"
    bias = _flag(args, "add_bias_linear", True, where)
    qkv_bias = _flag(args, "add_qkv_bias", False, where)
    tied = not _flag(args, "untie_embeddings_and_output_weights", False, where)
    vocab = args.get("padded_vocab_size")
    # Megatron-LM sets max_position_embeddings to seq_length when it is not given
    positions = args.get("max_position_embeddings") or args.get("seq_length")
    found = (
        f"swiglu {swiglu}, normalization {norm!r}, position_embedding_type {position!r}, "
        f"add_bias_linear {bias}, add_qkv_bias {qkv_bias}, {heads} heads / {groups} groups"
    )
    llama = swiglu and norm == "RMSNorm" and position == "rope" and not bias and not qkv_bias
    gpt = (
        not swiglu
        and norm == "LayerNorm"
        and position == "learned_absolute"
        and bias
        and groups == heads
        and head_dim * heads == hidden
    )
    if not (llama or gpt):
        raise CkptExplorerError(where, "a Llama-style or a GPT-style model (args)", found, HINT)
    if isinstance(positions, bool) or not isinstance(positions, int) or positions <= 0:
        raise CkptExplorerError(
            where, "args.max_position_embeddings (or seq_length)", repr(positions), HINT
        )
    rope_theta: float | None = None
    if llama:
        _check_off(args, ROPE_OFF, where)
        base = args.get("rotary_base")
        if base is None:
            notes.append("args have no rotary_base (older Megatron-LM, always 10000): 10000")
        rope_theta = float(base if isinstance(base, int | float) else 10000)
        if hidden % heads:
            raise CkptExplorerError(
                where, "hidden_size a multiple of the heads (HF's LlamaConfig)", found, HINT
            )
        activation = "silu"
    else:
        if "bias_gelu_fusion" not in args:
            raise CkptExplorerError(
                where,
                "args.bias_gelu_fusion: whether the GELU ran as megatron-core's fused tanh "
                "approximation or exactly",
                "none saved",
                HINT,
            )
        fused = _flag(args, "bias_gelu_fusion", True, where)
        activation = "gelu_new" if fused else "gelu"
        notes.append(
            "GELU: "
            + (
                "the tanh approximation (args.bias_gelu_fusion) -> gelu_new"
                if fused
                else "exact -> gelu"
            )
        )
    dropout = tuple(
        float(v) if isinstance(v, float | int) and not isinstance(v, bool) else None
        for v in (args.get("hidden_dropout"), args.get("attention_dropout"))
    )
    return HfSpec(
        LLAMA if llama else GPT2,
        layers,
        hidden,
        ffn,
        heads,
        groups,
        head_dim,
        vocab if isinstance(vocab, int) and not isinstance(vocab, bool) else None,
        positions,
        _epsilon(args, where),
        tied,
        activation,
        rope_theta,
        (dropout[0], dropout[1]),
        tuple(notes),
    )
