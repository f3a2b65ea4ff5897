"""GGUF exports of architectures beyond llama, made by llama.cpp's own converter.

Usage: ``python tests/fixture_makers/arch_gguf_maker.py OUT_DIR``

The converter is the one gguf_maker.py uses (llama.cpp's ``convert_hf_to_gguf.py`` from the
llama-cpp-python sdist, unpacked into a temporary folder, not into the output). Cases:

* ``<arch>_hf`` for arch in qwen2, qwen3, gemma2, gemma3, phi3: a tiny transformers model (random weights,
  norms away from their neutral value, 4 query heads over 2 KV heads) saved in float32 with
  ``save_pretrained``, beside a sentencepiece ``tokenizer.model``. Qwen2 has biases on q/k/v,
  Qwen3 q/k norms, Gemma 2 four norms per layer (stored by the converter as ``1 + w``), tied
  embeddings and soft-capping (``query_pre_attn_scalar`` = head_dim, as llama.cpp assumes),
  Gemma 3 (text) q/k norms (also ``1 + w``) and two rope bases, Phi-3 fused ``qkv_proj`` and
  ``gate_up_proj``;
* ``<arch>_<outtype>``: the converter's ``--outtype`` f32, f16, bf16 (and q8_0 for qwen2);
* ``<arch>_fault_norm``: the F16 export rewritten by gguf's ``GGUFWriter`` (every key/value
  and tensor copied) with one norm weight times 1.5.

Each export records transformers' own reading (``from_pretrained(hf, gguf_file=...)``'s
state_dict as ``<case>.transformers.safetensors``) or the error it raised.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _gguf_models import LLAMA_CPP_PYTHON, converted_case, converter, spm_tokenizer
from _manifest import main_out_dir, run_maker

OUTTYPES = {"qwen2": ("f32", "f16", "bf16", "q8_0"), "qwen3": ("f32", "f16"), "gemma2": ("f32", "f16", "bf16"),
            "gemma3": ("f32", "f16"), "phi3": ("f32", "f16")}  # fmt: skip
FAULT = {"qwen2": "blk.1.ffn_norm.weight", "qwen3": "blk.0.attn_k_norm.weight",
         "gemma2": "blk.0.post_ffw_norm.weight", "gemma3": "blk.1.attn_q_norm.weight", "phi3": "blk.1.attn_norm.weight"}  # fmt: skip
FAULT_HF = {
    "qwen2": "model.layers.1.post_attention_layernorm.weight",
    "qwen3": "model.layers.0.self_attn.k_norm.weight",
    "gemma2": "model.layers.0.post_feedforward_layernorm.weight",
    "gemma3": "model.layers.1.self_attn.q_norm.weight",
    "phi3": "model.layers.1.input_layernorm.weight",
}


def _tiny(folder: Path, arch: str, tokenizer: Path) -> None:
    from transformers import (
        Gemma2Config,
        Gemma2ForCausalLM,
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        Phi3Config,
        Phi3ForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    torch.manual_seed({"qwen2": 2, "qwen3": 3, "gemma2": 4, "gemma3": 6, "phi3": 5}[arch])
    sizes = dict(
        vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    model: Any
    if arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**sizes, tie_word_embeddings=False))
    elif arch == "phi3":  # fused qkv_proj and gate_up_proj, kept fused by the converter
        model = Phi3ForCausalLM(
            Phi3Config(
                **sizes,
                original_max_position_embeddings=256,
                pad_token_id=0,
                tie_word_embeddings=False,
            )
        )
    elif arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**sizes, head_dim=16, tie_word_embeddings=False))
    elif arch == "gemma3":  # q/k norms, two rope bases
        model = Gemma3ForCausalLM(
            Gemma3TextConfig(**sizes, head_dim=16, query_pre_attn_scalar=16, sliding_window=128)
        )
    else:
        model = Gemma2ForCausalLM(
            Gemma2Config(**sizes, head_dim=16, query_pre_attn_scalar=16, sliding_window=128)
        )
    neutral = 0.0 if arch.startswith("gemma") else 1.0  # Gemma's norms compute x * (1 + w)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(neutral + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
    model.save_pretrained(folder)
    shutil.copyfile(tokenizer, folder / "tokenizer.model")


def rewrite_with(src: Path, dst: Path, tensor: str, factor: float) -> None:
    """Copy the GGUF ``src`` to ``dst`` with gguf's reader and writer (every key/value and
    tensor as read, as gguf_new_metadata.py copies), ``tensor``'s values times ``factor``."""
    import gguf

    reader = gguf.GGUFReader(str(src))
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(str(dst), arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    datas = []
    for t in reader.tensors:
        data = np.array(t.data)
        if t.name == tensor:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32, t.tensor_type
            data = (data * np.float32(factor)).astype(data.dtype)
        datas.append(data)
        writer.add_tensor_info(t.name, data.shape, data.dtype, data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for data in datas:
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()


def make(out: Path) -> dict[str, Any]:
    cases: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        llama_cpp = converter(Path(tmp))
        tokenizer = spm_tokenizer(Path(tmp) / "spm", Path(tmp) / "spm" / "corpus.txt")
        for arch, outtypes in OUTTYPES.items():
            hf = out / f"{arch}_hf"
            _tiny(hf, arch, tokenizer)
            cases[f"{arch}_hf"] = {"path": hf.name, "family": "hf-single", "kind": "model"}
            for outtype in outtypes:
                case = f"{arch}_{outtype}"
                cases[case] = converted_case(
                    llama_cpp, hf, out, case, outtype, arch=arch, hf=hf.name
                )
            dst = out / f"{arch}_fault_norm.gguf"
            rewrite_with(out / f"{arch}_f16.gguf", dst, FAULT[arch], 1.5)
            cases[f"{arch}_fault_norm"] = {
                "path": dst.name,
                "family": "gguf",
                "kind": "model",
                "arch": arch,
                "hf": hf.name,
                "fault_gguf": FAULT[arch],
                "fault_hf": FAULT_HF[arch],
            }
    return cases


if __name__ == "__main__":
    from importlib.metadata import version

    sys.exit(
        run_maker(
            main_out_dir(sys.argv),
            "llama.cpp convert_hf_to_gguf (qwen2, qwen3, gemma2, gemma3, phi3)",
            f"llama-cpp-python {LLAMA_CPP_PYTHON} sdist; gguf {version('gguf')}",
            {"arch_gguf": make},
        )
    )
