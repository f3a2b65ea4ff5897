"""GGUF exports made by llama.cpp's own converter, and exports with planted faults.

Usage: ``python tests/fixture_makers/gguf_maker.py OUT_DIR``

llama.cpp's ``convert_hf_to_gguf.py`` (with its ``conversion/`` package and its own
``gguf-py``) comes from the llama-cpp-python sdist on PyPI, which vendors llama.cpp's source;
the sdist is downloaded once with pip into ``$CKPT_FIXTURE_CACHE/llama-cpp-python-sdist``
(:mod:`_gguf_models`, shared with ``kquant_maker``). The converter runs in a child process with its gguf-py first on ``PYTHONPATH``.

Cases:

* ``hf``: a tiny ``LlamaForCausalLM`` (random weights, norms away from 1, 4 query heads over
  2 KV heads) saved with ``save_pretrained``, with a sentencepiece BPE ``tokenizer.model``
  trained by the ``sentencepiece`` library (the converter needs a tokenizer);
* ``f32``, ``f16``, ``bf16``, ``q8_0``: the converter's ``--outtype``; ``split``: F16 split by
  ``--split-max-tensors 8`` into ``split-0000N-of-0000M.gguf``;
* planted faults, each a copy of a converter output with one tensor's bytes changed in place
  at the offset ``gguf.GGUFReader`` gives: ``fault_norm`` (F32: ``blk.0.attn_norm.weight``
  times 1.5, the llama.cpp #22565 symptom), ``fault_qk`` (F16: ``blk.1.attn_q.weight``
  permuted a second time, as a converter that permutes twice writes it), ``fault_scale``
  (Q8_0: the F16 scale of one 32-block of ``blk.0.ffn_up.weight`` doubled);
* ``mixtral`` (F16: 4 experts stacked per layer) and ``gemma`` (F32: norms stored as 1 + w)
  from tiny ``MixtralForCausalLM`` / ``GemmaForCausalLM`` folders (``<kind>_hf``), and
  ``fault_experts`` (``mixtral.gguf`` with experts 1 and 2 of ``ffn_up_exps`` swapped).

The manifest records, per export, transformers' own reading of it where it runs:
``from_pretrained(hf, gguf_file=...)``'s state_dict saved as ``<case>.transformers.safetensors``
(transformers dequantizes and undoes the permutation itself: an oracle for the pairing).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _gguf_models import (
    LLAMA_CPP_PYTHON,
    convert,
    converted_case,
    converter,
    patch,
    tensor_bytes,
    tiny_llama,
)
from _manifest import main_out_dir, run_maker

OUTTYPES = ("f32", "f16", "bf16", "q8_0")


def _tiny_other(folder: Path, kind: str, tokenizer: Path) -> None:
    """A tiny Mixtral (4 experts: the converter stacks them) or Gemma (the converter stores
    1 + w for its norms), beside the Llama's sentencepiece tokenizer."""
    from transformers import GemmaConfig, GemmaForCausalLM, MixtralConfig, MixtralForCausalLM

    torch.manual_seed(1)
    sizes = dict(
        vocab_size=64, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256,
    )  # fmt: skip
    if kind == "mixtral":
        model: Any = MixtralForCausalLM(
            MixtralConfig(**sizes, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2)
        )
    else:
        model = GemmaForCausalLM(GemmaConfig(**sizes, intermediate_size=128, head_dim=16))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(0.1 * torch.randn_like(p))
    model.save_pretrained(folder)
    shutil.copyfile(tokenizer, folder / "tokenizer.model")


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def _faults(out: Path) -> dict[str, dict[str, Any]]:
    cases = {}
    src = out / "f32.gguf"
    dst = out / "fault_norm.gguf"
    shutil.copyfile(src, dst)
    offset, _, data = tensor_bytes(dst, "blk.0.attn_norm.weight")
    patch(dst, offset, (data.astype(np.float32) * 1.5).astype("<f4").tobytes())
    cases["fault_norm"] = ("blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight")
    dst = out / "fault_qk.gguf"
    shutil.copyfile(out / "f16.gguf", dst)
    offset, _, data = tensor_bytes(dst, "blk.1.attn_q.weight")
    patch(dst, offset, _permute(data.astype(np.float16), 4).astype("<f2").tobytes())
    cases["fault_qk"] = ("blk.1.attn_q.weight", "model.layers.1.self_attn.q_proj.weight")
    dst = out / "fault_scale.gguf"
    shutil.copyfile(out / "q8_0.gguf", dst)
    offset, _, data = tensor_bytes(dst, "blk.0.ffn_up.weight")
    block = 5  # the 6th 34-byte block: its first 2 bytes are the F16 scale
    scale = np.frombuffer(bytes(data.reshape(-1)[block * 34 : block * 34 + 2]), "<f2")
    patch(dst, offset + block * 34, (scale * 2).astype("<f2").tobytes())
    cases["fault_scale"] = ("blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight")
    return {
        case: {
            "path": f"{case}.gguf",
            "family": "gguf",
            "kind": "model",
            "fault_gguf": g,
            "fault_hf": h,
        }
        for case, (g, h) in cases.items()
    }


def make(out: Path) -> dict[str, Any]:
    llama_cpp = converter(out)
    hf = out / "hf"
    state = tiny_llama(hf, 64, 128)
    cases: dict[str, Any] = {
        "hf": {
            "path": "hf",
            "family": "hf-single",
            "kind": "model",
            "tensors": {
                k: {"dtype": str(v.dtype).removeprefix("torch."), "shape": list(v.shape)}
                for k, v in state.items()
            },
        }
    }
    for outtype in OUTTYPES:
        cases[outtype] = converted_case(llama_cpp, hf, out, outtype, outtype)
    split_dir = out / "split"
    split_dir.mkdir(exist_ok=True)
    convert(llama_cpp, hf, split_dir / "split.gguf", "f16", "--split-max-tensors", "8")
    first = sorted(split_dir.glob("split-*-of-*.gguf"))
    cases["split"] = {
        "path": f"split/{first[0].name}",
        "family": "gguf",
        "kind": "model",
        "splits": [p.name for p in first],
    }
    cases.update(_faults(out))
    for kind, outtype in (("mixtral", "f16"), ("gemma", "f32")):
        _tiny_other(out / f"{kind}_hf", kind, hf / "tokenizer.model")
        convert(llama_cpp, out / f"{kind}_hf", out / f"{kind}.gguf", outtype)
        cases[f"{kind}_hf"] = {"path": f"{kind}_hf", "family": "hf-single", "kind": "model"}
        cases[kind] = {"path": f"{kind}.gguf", "family": "gguf", "kind": "model"}
    dst = out / "fault_experts.gguf"  # a layer's experts 1 and 2 swapped in ffn_up_exps
    shutil.copyfile(out / "mixtral.gguf", dst)
    offset, _, data = tensor_bytes(dst, "blk.0.ffn_up_exps.weight")
    patch(dst, offset, data[[0, 2, 1, 3]].astype("<f2").tobytes())
    cases["fault_experts"] = {
        "path": dst.name,
        "family": "gguf",
        "kind": "model",
        "fault_gguf": "blk.0.ffn_up_exps.weight",
        "fault_hf": [f"model.layers.0.block_sparse_moe.experts.{e}.w3.weight" for e in (1, 2)],
    }
    return cases


if __name__ == "__main__":
    from importlib.metadata import version

    sys.exit(
        run_maker(
            main_out_dir(sys.argv),
            "llama.cpp convert_hf_to_gguf",
            f"llama-cpp-python {LLAMA_CPP_PYTHON} sdist; gguf {version('gguf')}",
            {"gguf": make},
        )
    )
