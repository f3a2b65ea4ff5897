"""Frontier-sized HF safetensors folders as sparse files: real headers, no tensor bytes.

    .venv/bin/python bench/frontier_maker.py deepseek-v3 OUT [--layers 61]
    .venv/bin/python bench/frontier_maker.py llama3-405b OUT [--layers 126]

A tensor list is built from a model config (DeepSeek-V3: 61 layers, the first 3 dense, 256
routed experts and one shared expert per MoE layer, fp8 e4m3 weights with float32
``weight_scale_inv`` over 128 x 128 blocks; Llama-3-405B: 126 bf16 layers), cut into the
release's shard count (163 / 191) in layer order, and each shard written the way the
safetensors library writes it (compact JSON header padded to 8 bytes, tensors ordered by dtype
then name, back to back) — then the file is truncated up to its full size and only the first
4 KiB of each tensor written (random bytes), so ~700 GB of checkpoint takes under 400 MB of
disk. Listing, indexes and headers are exactly a real checkpoint's; values are not. Fewer ``--layers`` keep the per-layer shard size
(for growth measurements).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 3,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
    },
}
DEEPSEEK_SHARDS = 163

LLAMA3_405B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 16384,
    "intermediate_size": 53248,
    "num_hidden_layers": 126,
    "num_attention_heads": 128,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
LLAMA_SHARDS = 191

BITS = {"F8_E4M3": 8, "BF16": 16, "F32": 32}
Tensor = tuple[str, str, tuple[int, ...]]  # name, safetensors dtype, shape


def _fp8(name: str, out: int, inp: int, block: int) -> Iterator[Tensor]:
    yield f"{name}.weight", "F8_E4M3", (out, inp)
    yield f"{name}.weight_scale_inv", "F32", (math.ceil(out / block), math.ceil(inp / block))


def deepseek_v3_tensors(cfg: dict) -> list[Tensor]:
    """Every tensor of a DeepSeek-V3 checkpoint (HF names, fp8 weights with block scales)."""
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    block = cfg["quantization_config"]["weight_block_size"][0]
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    out: list[Tensor] = [("model.embed_tokens.weight", "BF16", (cfg["vocab_size"], h))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out += [(f"{p}.input_layernorm.weight", "BF16", (h,))]
        out += [(f"{p}.post_attention_layernorm.weight", "BF16", (h,))]
        a = f"{p}.self_attn"
        out += _fp8(f"{a}.q_a_proj", cfg["q_lora_rank"], h, block)
        out += [(f"{a}.q_a_layernorm.weight", "BF16", (cfg["q_lora_rank"],))]
        out += _fp8(f"{a}.q_b_proj", heads * qk, cfg["q_lora_rank"], block)
        kv_a = cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]
        out += _fp8(f"{a}.kv_a_proj_with_mqa", kv_a, h, block)
        out += [(f"{a}.kv_a_layernorm.weight", "BF16", (cfg["kv_lora_rank"],))]
        kv_b = heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"])
        out += _fp8(f"{a}.kv_b_proj", kv_b, cfg["kv_lora_rank"], block)
        out += _fp8(f"{a}.o_proj", h, heads * cfg["v_head_dim"], block)
        m = f"{p}.mlp"
        if i < cfg["first_k_dense_replace"]:
            out += _mlp(m, h, cfg["intermediate_size"], block)
            continue
        out += [(f"{m}.gate.weight", "BF16", (cfg["n_routed_experts"], h))]
        out += [(f"{m}.gate.e_score_correction_bias", "F32", (cfg["n_routed_experts"],))]
        for e in range(cfg["n_routed_experts"]):
            out += _mlp(f"{m}.experts.{e}", h, cfg["moe_intermediate_size"], block)
        shared = cfg["moe_intermediate_size"] * cfg["n_shared_experts"]
        out += _mlp(f"{m}.shared_experts", h, shared, block)
    out += [("model.norm.weight", "BF16", (h,)), ("lm_head.weight", "BF16", (cfg["vocab_size"], h))]
    return out


def _mlp(m: str, h: int, inter: int, block: int) -> list[Tensor]:
    return [
        *_fp8(f"{m}.gate_proj", inter, h, block),
        *_fp8(f"{m}.up_proj", inter, h, block),
        *_fp8(f"{m}.down_proj", h, inter, block),
    ]


def llama3_tensors(cfg: dict) -> list[Tensor]:
    """Every tensor of a Llama-3 checkpoint in HF names (bf16)."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    head = h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * head
    out: list[Tensor] = [("model.embed_tokens.weight", "BF16", (cfg["vocab_size"], h))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out += [
            (f"{p}.input_layernorm.weight", "BF16", (h,)),
            (f"{p}.self_attn.q_proj.weight", "BF16", (h, h)),
            (f"{p}.self_attn.k_proj.weight", "BF16", (kv, h)),
            (f"{p}.self_attn.v_proj.weight", "BF16", (kv, h)),
            (f"{p}.self_attn.o_proj.weight", "BF16", (h, h)),
            (f"{p}.post_attention_layernorm.weight", "BF16", (h,)),
            (f"{p}.mlp.gate_proj.weight", "BF16", (inter, h)),
            (f"{p}.mlp.up_proj.weight", "BF16", (inter, h)),
            (f"{p}.mlp.down_proj.weight", "BF16", (h, inter)),
        ]
    out += [("model.norm.weight", "BF16", (h,)), ("lm_head.weight", "BF16", (cfg["vocab_size"], h))]
    return out


def nbytes(t: Tensor) -> int:
    return math.prod(t[2]) * BITS[t[1]] // 8


def split_shards(tensors: list[Tensor], n: int) -> list[list[Tensor]]:
    """Up to ``n`` contiguous groups of about equal bytes, in order (a tensor goes to the
    group its midpoint falls in; empty groups are dropped)."""
    total = sum(nbytes(t) for t in tensors) or 1
    groups: list[list[Tensor]] = [[] for _ in range(n)]
    done = 0
    for t in tensors:
        groups[min(n - 1, int((done + nbytes(t) / 2) * n / total))].append(t)
        done += nbytes(t)
    return [g for g in groups if g]


STAMP = 4096  # random bytes written at the start of each tensor (the rest is a hole)
_POOL = random.Random(0).randbytes(1 << 16)


def write_shard(path: Path, tensors: list[Tensor]) -> int:
    """One safetensors file as the reference writer lays it out; each tensor's data a hole
    after its first :data:`STAMP` random bytes (so that what reads values — the tied-head
    check, the security walk looking for a pickle's line end — stops where it would on real
    weights instead of running through gigabytes of zeros)."""
    ordered = sorted(tensors, key=lambda t: (-BITS[t[1]], t[1], t[0]))
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    pos = 0
    for name, dtype, shape in ordered:
        end = pos + nbytes((name, dtype, shape))
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, end]}
        pos = end
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.truncate(8 + len(raw) + pos)
        for name, info in list(header.items())[1:]:
            begin, end = info["data_offsets"]  # type: ignore[index]
            start = zlib.crc32(name.encode()) % (len(_POOL) - STAMP)  # each tensor its own
            os.pwrite(
                f.fileno(), _POOL[start : start + min(STAMP, end - begin)], 8 + len(raw) + begin
            )
    return pos


def write_folder(out: Path, cfg: dict, tensors: list[Tensor], n_shards: int) -> dict:
    """Shards, ``model.safetensors.index.json`` and ``config.json`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    groups = split_shards(tensors, n_shards)
    weight_map: dict[str, str] = {}
    total = 0
    for i, group in enumerate(groups, 1):
        name = f"model-{i:05d}-of-{len(groups):05d}.safetensors"
        total += write_shard(out / name, group)
        weight_map.update((t[0], name) for t in group)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return {"tensors": len(tensors), "shards": len(groups), "bytes": total}


MODELS = {
    "deepseek-v3": (DEEPSEEK_V3, deepseek_v3_tensors, DEEPSEEK_SHARDS),
    "llama3-405b": (LLAMA3_405B, llama3_tensors, LLAMA_SHARDS),
}


def make(model: str, out: Path, layers: int | None = None, **overrides: int) -> dict:
    """Write ``model`` (a key of :data:`MODELS`) to ``out``; fewer layers keep shard sizes."""
    base, build, shards = MODELS[model]
    cfg = {**base, **overrides}
    if layers is not None:
        shards = max(1, round(shards * layers / base["num_hidden_layers"]))
        cfg["num_hidden_layers"] = layers
    return write_folder(out, cfg, build(cfg), shards)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=None)
    args = parser.parse_args()
    print(json.dumps(make(args.model, args.out, args.layers)))


if __name__ == "__main__":
    main()
