"""K-quant GGUF exports made by llama.cpp's own ``llama-quantize``, and planted faults.

Usage: ``python tests/fixture_makers/kquant_maker.py OUT_DIR``

``llama-quantize`` is built with cmake (CPU only, that one target, ``-j2``) from the llama.cpp
source vendored in the llama-cpp-python sdist (:mod:`_gguf_models`, shared with ``gguf_maker``);
the build is cached under ``$CKPT_FIXTURE_CACHE/llama-quantize-<sdist version>`` like a fixture.

Cases:

* ``hf``: a tiny ``LlamaForCausalLM`` whose rows are 256 wide (K-quants store 256-element
  super-blocks; a row that is not a multiple of 256 makes llama-quantize fall back to another
  type), with the sentencepiece tokenizer the converter needs; ``f16``: llama.cpp's
  ``convert_hf_to_gguf.py --outtype f16`` of it;
* ``q4_k_m``, ``q5_k_m``, ``q6_k``, ``q3_k_m``, ``q2_k``, ``q4_0``, ``q4_1``, ``q5_0``,
  ``q5_1``, ``q8_0``: ``llama-quantize f16.gguf <case>.gguf <TYPE>``; each case records the ggml type
  every tensor really holds (``types``, read with ``gguf.GGUFReader``);
* ``mixtral_q4_k_m``: the same of a 256-wide tiny Mixtral (``mixtral_hf``; experts stacked);
* planted faults in copies of ``q4_k_m.gguf``, bytes changed in place at the offset
  ``gguf.GGUFReader`` gives: ``fault_kq_norm`` (``blk.0.attn_norm.weight``, F32, times 1.5)
  and ``fault_kq_swap`` (the Q4_K blocks of ``blk.0.attn_q.weight`` replaced by those of
  ``blk.1.attn_q.weight``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _gguf_models import (
    LLAMA_CPP_PYTHON,
    convert,
    converter,
    fixture_cache,
    patch,
    tensor_bytes,
    tiny_llama,
    unpack_llama_cpp,
)
from _manifest import main_out_dir, run_maker

QTYPES = ("Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "Q2_K", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DGGML_OPENMP=OFF", "-DLLAMA_CURL=OFF",
    "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_TOOLS=ON", "-DGGML_METAL=OFF", "-DGGML_CUDA=OFF",
)  # fmt: skip


def llama_quantize() -> Path:
    """The ``llama-quantize`` binary, built once per sdist version into the fixture cache."""
    root = fixture_cache() / f"llama-quantize-{LLAMA_CPP_PYTHON}"
    binary = root / "build" / "bin" / "llama-quantize"
    if binary.is_file():
        return binary
    src = root / "src"
    if not (src / "CMakeLists.txt").is_file():
        unpack_llama_cpp(src, lambda rel: True)
    cmake = shutil.which("cmake") or str(Path(sys.executable).parent / "cmake")
    start = time.monotonic()
    for cmd in (
        [cmake, "-S", str(src), "-B", str(root / "build"), *CMAKE_FLAGS],
        [cmake, "--build", str(root / "build"), "--target", "llama-quantize", "-j2"],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd[:3])} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
            )
    (root / "build-seconds.txt").write_text(f"{time.monotonic() - start:.1f}\n")
    return binary


def _tiny_mixtral(folder: Path, tokenizer: Path) -> None:
    """A 256-wide Mixtral (4 experts: the converter stacks them into one tensor per layer)."""
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(1)
    config = MixtralConfig(
        vocab_size=64, hidden_size=256, intermediate_size=256, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        num_local_experts=4, num_experts_per_tok=2,
    )  # fmt: skip
    MixtralForCausalLM(config).save_pretrained(folder)
    shutil.copyfile(tokenizer, folder / "tokenizer.model")


def _types(path: Path) -> dict[str, str]:
    """The ggml type each tensor of a file really holds, as gguf.GGUFReader reads it."""
    import gguf

    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors}


def _faults(out: Path) -> dict[str, Any]:
    dst = out / "fault_kq_norm.gguf"
    shutil.copyfile(out / "q4_k_m.gguf", dst)
    offset, _, data = tensor_bytes(dst, "blk.0.attn_norm.weight")
    patch(dst, offset, (data.astype(np.float32) * 1.5).astype("<f4").tobytes())
    swap = out / "fault_kq_swap.gguf"
    shutil.copyfile(out / "q4_k_m.gguf", swap)
    offset, nbytes, _ = tensor_bytes(swap, "blk.0.attn_q.weight")
    _, other_bytes, other = tensor_bytes(swap, "blk.1.attn_q.weight")
    assert nbytes == other_bytes
    patch(swap, offset, other.astype(np.uint8).tobytes())
    return {
        "fault_kq_norm": ("blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"),
        "fault_kq_swap": ("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"),
    }


def _quantize(binary: Path, src: Path, dst: Path, qtype: str) -> None:
    proc = subprocess.run(
        [str(binary), str(src), str(dst), qtype, "2"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"llama-quantize {qtype} failed:\n{proc.stderr[-3000:]}")


def make(out: Path) -> dict[str, Any]:
    binary = llama_quantize()
    llama_cpp = converter(out)
    hf = out / "hf"
    tiny_llama(hf, 256, 512)
    cases: dict[str, Any] = {"hf": {"path": "hf", "family": "hf-single", "kind": "model"}}
    f16 = out / "f16.gguf"
    convert(llama_cpp, hf, f16, "f16")
    cases["f16"] = {"path": f16.name, "family": "gguf", "kind": "model", "types": _types(f16)}
    for qtype in QTYPES:
        path = out / f"{qtype.lower()}.gguf"
        _quantize(binary, f16, path, qtype)
        cases[qtype.lower()] = {
            "path": path.name,
            "family": "gguf",
            "kind": "model",
            "qtype": qtype,
            "types": _types(path),
        }
    _tiny_mixtral(out / "mixtral_hf", hf / "tokenizer.model")
    convert(llama_cpp, out / "mixtral_hf", out / "mixtral_f16.gguf", "f16")
    moe = out / "mixtral_q4_k_m.gguf"
    _quantize(binary, out / "mixtral_f16.gguf", moe, "Q4_K_M")
    cases["mixtral_hf"] = {"path": "mixtral_hf", "family": "hf-single", "kind": "model"}
    cases["mixtral_q4_k_m"] = {"path": moe.name, "family": "gguf", "kind": "model"}
    cases["mixtral_q4_k_m"]["types"] = _types(moe)
    for case, (g, h) in _faults(out).items():
        path = f"{case}.gguf"
        cases[case] = {"path": path, "family": "gguf", "kind": "model", "fault_gguf": g}
        cases[case] |= {"fault_hf": h, "types": _types(out / path)}
    return cases


if __name__ == "__main__":
    if sys.argv[1:] == ["--build"]:
        print(llama_quantize())
        sys.exit(0)
    sys.exit(
        run_maker(
            main_out_dir(sys.argv),
            "llama.cpp llama-quantize",
            f"llama-cpp-python {LLAMA_CPP_PYTHON} sdist",
            {"kquant": make},
        )
    )
