"""What the GGUF makers (``gguf_maker``, ``kquant_maker``) share: llama.cpp's source from the
llama-cpp-python sdist, its converter run in a child process, the tiny Llama they export, and
reading/patching one tensor's bytes where ``gguf.GGUFReader`` says they are.

The sdist (which vendors llama.cpp's source) is downloaded once with pip into
``$CKPT_FIXTURE_CACHE/llama-cpp-python-sdist``. Only the makers that import this module hash it
into their cache key (tests/conftest.py), so changing it re-makes those two fixtures.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

LLAMA_CPP_PYTHON = "0.3.36"  # vendors llama.cpp with gguf-py 0.19.0 (the gguf on PyPI)


def fixture_cache() -> Path:
    """The fixture cache folder (tests/conftest.py's ``CACHE``)."""
    return Path(os.environ.get("CKPT_FIXTURE_CACHE", Path(__file__).parents[2] / ".fixture-cache"))


def sdist() -> Path:
    """The llama-cpp-python sdist, downloaded once into the fixture cache."""
    folder = fixture_cache() / "llama-cpp-python-sdist"
    tar = folder / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    if not tar.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
             "llama-cpp-python", f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(folder)],
            check=True,
        )  # fmt: skip
    return tar


def unpack_llama_cpp(dest: Path, wanted: Callable[[str], bool]) -> None:
    """Write the sdist's ``vendor/llama.cpp/`` files whose relative path is ``wanted`` under
    dest, keeping their executable bits (never outside dest)."""
    prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp/"
    with tarfile.open(sdist()) as tf:
        for member in tf.getmembers():
            rel = member.name[len(prefix) :] if member.name.startswith(prefix) else None
            if rel is None or not member.isfile() or ".." in Path(rel).parts or not wanted(rel):
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            data = tf.extractfile(member)
            assert data is not None
            target.write_bytes(data.read())
            target.chmod(member.mode & 0o755 | 0o600)


def converter(out: Path) -> Path:
    """llama.cpp's converter, its conversion package and its gguf-py, unpacked under out."""
    root = out / "llama.cpp"
    if not (root / "convert_hf_to_gguf.py").is_file():
        unpack_llama_cpp(
            root,
            lambda rel: (
                rel == "convert_hf_to_gguf.py" or rel.startswith(("conversion/", "gguf-py/"))
            ),
        )
    return root


def convert(llama_cpp: Path, hf: Path, out: Path, outtype: str, *extra: str) -> None:
    """``convert_hf_to_gguf.py hf --outtype outtype --outfile out``, its gguf-py first."""
    env = {**os.environ, "PYTHONPATH": str(llama_cpp / "gguf-py")}
    proc = subprocess.run(
        [sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(hf),
         "--outtype", outtype, "--outfile", str(out), *extra],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"convert_hf_to_gguf {outtype} failed:\n{proc.stderr[-4000:]}")


def tiny_llama(folder: Path, hidden_size: int, intermediate_size: int) -> dict[str, Any]:
    """A tiny ``LlamaForCausalLM`` (seed 0, 4 query heads over 2 KV heads, norms 1 + 0.1·noise)
    saved with ``save_pretrained``, beside a 64-piece sentencepiece BPE ``tokenizer.model``
    (the converter needs a tokenizer); returns the model's state_dict."""
    from transformers import LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    spm_tokenizer(folder, folder.parent / "corpus.txt")
    (folder / "tokenizer.vocab").unlink()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=256, tie_word_embeddings=False,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
    model.save_pretrained(folder)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def tensor_bytes(path: Path, name: str) -> tuple[int, int, Any]:
    """(offset, nbytes, data) of one tensor, as gguf.GGUFReader gives them."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    t = next(t for t in reader.tensors if t.name == name)
    return int(t.data_offset), int(t.n_bytes), np.array(t.data)


def patch(path: Path, offset: int, data: bytes) -> None:
    """Overwrite ``len(data)`` bytes of path at offset, in place."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def transformers_oracle(hf: Path, gguf_file: Path, out: Path) -> str | None:
    """transformers' own reading of the export, saved as safetensors; the error if it fails."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf_file.parent), gguf_file=gguf_file.name, torch_dtype=torch.float32
        )
    except Exception as e:  # recorded: the tests skip what transformers cannot read
        return f"{type(e).__name__}: {e}"[:500]
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(state, str(out))
    return None


def spm_tokenizer(folder: Path, corpus: Path) -> Path:
    """A 64-piece sentencepiece BPE ``tokenizer.model`` in ``folder`` (trained on a fixed
    text written to ``corpus``): the converter needs a tokenizer."""
    import sentencepiece as spm

    folder.mkdir(parents=True, exist_ok=True)
    corpus.write_text(
        "\n".join(f"the quick brown fox {i} jumps over the lazy dog {i * 7}" for i in range(200))
    )
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(folder / "tokenizer"), vocab_size=64,
        model_type="bpe", character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
        minloglevel=2,
    )  # fmt: skip
    return folder / "tokenizer.model"


def converted_case(
    llama_cpp: Path, source: Path, out: Path, case: str, outtype: str, **extra: Any
) -> dict[str, Any]:
    """The HF folder ``source`` converted by llama.cpp to ``out/<case>.gguf`` at ``outtype``,
    with transformers' own reading of it beside (``<case>.transformers.safetensors``): the
    manifest case."""
    path = out / f"{case}.gguf"
    convert(llama_cpp, source, path, outtype)
    oracle = out / f"{case}.transformers.safetensors"
    error = transformers_oracle(source, path, oracle)
    return {
        "path": path.name,
        "family": "gguf",
        "kind": "model",
        **extra,
        "outtype": outtype,
        "transformers": None if error else oracle.name,
        "transformers_error": error,
    }
