"""An export's metadata against its source's ``config.json``: the sizes llama.cpp reads.

llama.cpp builds the model from the GGUF's keys, never from ``config.json``; a converter that
writes a wrong context length, head count or rope base makes a model that loads and runs
wrong. Each known key (``<arch>.context_length`` ...) is compared with the config field the
converters take it from (several names where HF models differ, transformers 5's
``rope_parameters`` included); a float stored as F32 is compared at F32. Each check is one
:class:`~.rows.ValueDiff` row under ``export.<key>`` that counts in the verdict.
"""

from __future__ import annotations

import struct
from typing import Any

from ..view import CheckpointView
from .rows import ValueDiff

# GGUF key (after "<arch>.") -> config.json fields, first present wins
CHECKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("context_length", ("max_position_embeddings", "n_positions", "n_ctx")),
    ("embedding_length", ("hidden_size", "n_embd", "d_model")),
    ("block_count", ("num_hidden_layers", "n_layer", "num_layers")),
    ("feed_forward_length", ("intermediate_size", "n_inner", "ffn_dim")),
    ("attention.head_count", ("num_attention_heads", "n_head")),
    ("attention.head_count_kv", ("num_key_value_heads",)),
    ("rope.freq_base", ("rope_theta", "rope_parameters.rope_theta")),
    ("attention.layer_norm_rms_epsilon", ("rms_norm_eps",)),
    ("expert_count", ("num_local_experts", "num_experts")),
    ("expert_used_count", ("num_experts_per_tok",)),
    ("vocab_size", ("vocab_size",)),
)


def _field(config: dict[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def _same(config_value: Any, gguf_value: Any) -> bool:
    if isinstance(gguf_value, float) and isinstance(config_value, int | float):
        return _f32(float(config_value)) == gguf_value
    return bool(config_value == gguf_value)


def config_checks(source: CheckpointView, export: CheckpointView) -> list[ValueDiff]:
    """One row per key both sides have; none when the source has no ``config.json``."""
    config = source.values.get("config.json")
    if not isinstance(config, dict):
        return []
    md = {k.removeprefix("__metadata__."): v for k, v in export.values.items()}
    arch = md.get("general.architecture")
    text = config.get("text_config")
    if isinstance(text, dict):  # a multimodal model: the language model's sizes
        config = {**config, **text}
    rows = []
    for key, fields in CHECKS:
        gguf_key = f"{arch}.{key}"
        if gguf_key not in md:
            continue
        found = next(((f, v) for f in fields if (v := _field(config, f)) is not None), None)
        if found is None:
            continue
        name, value = found
        status = "equal" if _same(value, md[gguf_key]) else "changed"
        rows.append(
            ValueDiff(f"export.{gguf_key} vs config.json {name}", status, value, md[gguf_key])
        )
    return rows
