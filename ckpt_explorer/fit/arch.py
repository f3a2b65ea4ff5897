"""Architecture facts of a checkpoint: from its config.json, else inferred from tensor names/shapes.

Every fact records where it came from; a fact that neither source decides stays None (unknown).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CkptExplorerError
from ..io.location import Location, as_location
from ..types import TensorRecord
from ..view import CheckpointView

_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")
_EMBED = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "tok_embeddings.weight")
_FUSED_QKV = {"c_attn.weight": "GPT-2 c_attn", "query_key_value.weight": "query_key_value"}
_FUSED_QKV["qkv_proj.weight"] = "qkv_proj"


@dataclass
class ArchFacts:
    """Sizes that decide a parallel layout; None = unknown. ``sources``: fact -> where from."""

    model_type: str | None = None
    layers: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    hidden: int | None = None
    head_dim: int | None = None
    intermediate: int | None = None
    vocab: int | None = None
    experts: int | None = None
    tied: bool | None = None
    fused_qkv: str | None = None
    config_path: str | None = None
    sources: dict[str, str] = field(default_factory=dict)

    def set(self, name: str, value: Any, source: str) -> None:
        """Record ``value`` for fact ``name`` unless it is already known or ``value`` is None."""
        if value is not None and getattr(self, name) is None:
            setattr(self, name, value)
            self.sources[name] = source

    def to_json(self) -> dict[str, Any]:
        keys = "model_type layers heads kv_heads hidden head_dim intermediate vocab experts"
        keys += " tied fused_qkv config_path"
        return {k: getattr(self, k) for k in keys.split()} | {"sources": dict(self.sources)}


def find_config(path: Path | Location) -> Path | Location | None:
    """config.json of a model folder, of its model part (``modeling/``), or next to a file."""
    folder = path if path.is_dir() else path.parent
    for cand in (folder / "config.json", folder / "modeling" / "config.json"):
        if cand.is_file():
            return cand
    return None


def _first(cfg: dict[str, Any], *keys: str) -> tuple[Any, str | None]:
    for k in keys:
        if isinstance(cfg.get(k), int) and not isinstance(cfg.get(k), bool):
            return cfg[k], k
    return None, None


def facts_from_config(cfg: dict[str, Any], where: str) -> ArchFacts:
    """Facts an HF-style config states; defaults HF applies are applied and said."""
    sub = cfg.get("text_config")
    if isinstance(sub, dict):  # multimodal wrappers keep the language model here
        cfg = {**sub, "model_type": cfg.get("model_type")}
    f = ArchFacts(config_path=where)
    mt = cfg.get("model_type")
    f.model_type = mt if isinstance(mt, str) else None
    src = "config.json"
    for name, keys in {
        "layers": ("num_hidden_layers", "n_layer", "num_layers"),
        "heads": ("num_attention_heads", "n_head"),
        "hidden": ("hidden_size", "n_embd", "d_model"),
        "head_dim": ("head_dim",),
        "intermediate": ("intermediate_size", "n_inner", "ffn_hidden_size"),
        "vocab": ("vocab_size",),
        "experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    }.items():
        value, key = _first(cfg, *keys)
        f.set(name, value, f"{src} {key}")
    if f.model_type == "falcon":
        if cfg.get("new_decoder_architecture"):
            f.set("kv_heads", cfg.get("num_kv_heads"), f"{src} num_kv_heads")
        elif cfg.get("multi_query", True):
            f.set("kv_heads", 1, f"{src} multi_query (Falcon default true)")
        f.set("fused_qkv", "query_key_value", f"{src} model_type falcon")
    value, key = _first(cfg, "num_key_value_heads", "num_kv_heads", "multi_query_group_num")
    f.set("kv_heads", value, f"{src} {key}")
    if f.kv_heads is None and f.heads is not None and "num_key_value_heads" not in cfg:
        if f.model_type in {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "gemma"}:
            f.set(
                "kv_heads", f.heads, f"{src}: no num_key_value_heads, HF uses num_attention_heads"
            )
        elif f.model_type in {"gpt2", "gpt_neox", "opt", "bloom", "gptj"}:
            f.set("kv_heads", f.heads, f"{src}: {f.model_type} has no GQA")
    if f.model_type == "gpt2":
        f.set("fused_qkv", "GPT-2 c_attn", f"{src} model_type gpt2")
        if f.hidden is not None:
            f.set("intermediate", 4 * f.hidden, f"{src}: n_inner null, GPT-2 uses 4 * n_embd")
    if f.head_dim is None and f.heads and f.hidden and f.hidden % f.heads == 0:
        f.set("head_dim", f.hidden // f.heads, f"{src} hidden_size / num_attention_heads")
    if isinstance(cfg.get("tie_word_embeddings"), bool):
        f.set("tied", cfg["tie_word_embeddings"], f"{src} tie_word_embeddings")
    return f


def model_tensors(view: CheckpointView) -> Sequence[TensorRecord]:
    """The model's tensors of a view: itself, or the model part of a training state."""
    if view.kind != "model":
        for part in view.parts.values():
            if part.kind == "model":
                return part.tensors
        if view.optimizer is not None or view.kind == "optimizer":
            return ()
    return view.tensors


def _find(records: dict[str, TensorRecord], suffix: str) -> TensorRecord | None:
    for name, r in records.items():
        if name == suffix or name.endswith("." + suffix):
            return r
    return None


def _heads_from(f: ArchFacts, q: TensorRecord, k: TensorRecord, hd: int) -> None:
    if q.shape[0] % hd == 0 and k.shape[0] % hd == 0:
        f.set("heads", q.shape[0] // hd, f"tensors: {q.name} rows / head_dim")
        f.set("kv_heads", k.shape[0] // hd, f"tensors: {k.name} rows / head_dim")


def add_tensor_facts(f: ArchFacts, tensors: Sequence[TensorRecord]) -> None:
    """Fill what the config left unknown from names and shapes (only what they decide)."""
    by = {r.name: r for r in tensors}
    src = "tensors"
    layers = {int(m.group(1)) for n in by if (m := _LAYER.search(n))}
    if layers:
        f.set("layers", max(layers) + 1, f"{src}: layer indices 0..{max(layers)}")
    for suffix in _EMBED:
        if (r := _find(by, suffix)) is not None and len(r.shape) == 2:
            f.set("vocab", r.shape[0], f"{src}: {r.name} rows")
            f.set("hidden", r.shape[1], f"{src}: {r.name} columns")
            break
    for suffix, label in _FUSED_QKV.items():
        if _find(by, suffix) is not None:
            f.set("fused_qkv", label, f"{src}: {suffix}")
    experts = {int(m.group(1)) for n in by if (m := _EXPERT.search(n))}
    if experts:
        f.set("experts", max(experts) + 1, f"{src}: expert indices 0..{max(experts)}")
    q, k = _find(by, "q_proj.weight"), _find(by, "k_proj.weight")
    qn = _find(by, "q_norm.weight")
    if qn is not None and len(qn.shape) == 1 and q is not None and qn.shape[0] < q.shape[0]:
        # a per-head norm (Qwen3, Gemma3); a full-width one (OLMo2) says nothing of the heads
        f.set("head_dim", qn.shape[0], f"{src}: {qn.name} length (per-head norm)")
    hd = f.head_dim
    if hd and q is not None and k is not None and len(q.shape) == len(k.shape) == 2:
        _heads_from(f, q, k, hd)
    up = _find(by, "up_proj.weight") or _find(by, "gate_proj.weight")
    if up is not None and len(up.shape) == 2:
        f.set("intermediate", up.shape[0], f"{src}: {up.name} rows")
    fc = _find(by, "mlp.c_fc.weight")
    if fc is not None and len(fc.shape) == 2:  # GPT-2 Conv1D: [in, out]
        f.set("intermediate", fc.shape[1], f"{src}: {fc.name} columns")


def read_arch(path: str | Path | Location, view: CheckpointView) -> ArchFacts:
    """Facts of the checkpoint at ``path`` (opened as ``view``): config.json first, then tensors."""
    cfg_path = find_config(as_location(path))
    if cfg_path is not None:
        try:
            cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise CkptExplorerError(
                cfg_path, "a JSON model config", f"unreadable JSON ({e})", "fix or remove it"
            ) from e
        if not isinstance(cfg, dict):
            raise CkptExplorerError(cfg_path, "a JSON object", type(cfg).__name__, "")
        facts = facts_from_config(cfg, str(cfg_path))
    else:
        facts = ArchFacts()
    add_tensor_facts(facts, model_tensors(view))
    return facts
