"""HF -> GGUF: ``ckpt-explorer convert --to gguf`` (written and verified) against llama.cpp's
own ``convert_hf_to_gguf.py`` on the same Hugging Face folder.

    .venv/bin/python bench/bench_gguf_convert.py LLAMA_CPP_DIR [--hidden 1024] [--layers 8]
        [--outtype q8_0]

``LLAMA_CPP_DIR`` holds llama.cpp's ``convert_hf_to_gguf.py``, its ``conversion/`` package and
its ``gguf-py`` (the gguf fixture maker unpacks them from the llama-cpp-python sdist into its
fixture folder, ``llama.cpp/``). Writes, under bench/.data/gguf-convert/ (git-ignored), a
random ``LlamaForCausalLM`` (float32, vocab 32000) with a ``tokenizer.model`` (copied from
``--tokenizer`` or trained on a small corpus with sentencepiece). Then times, whole process,
each converter once (after one warm-up run of each), checks that both files hold the same
tensors byte for byte and prints the seconds and the ratio. Our figure includes reading the
whole output back and comparing it with the source (verification); llama.cpp's does not.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).parent / ".data" / "gguf-convert"


def make_model(hidden: int, layers: int, tokenizer: Path | None) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = DATA / f"llama-{hidden}-{layers}"
    if (folder / "model.safetensors").exists() or (
        folder / "model.safetensors.index.json"
    ).exists():
        return folder
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3 // 32 * 32,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=max(1, hidden // 256),
        max_position_embeddings=4096,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    if tokenizer is not None:
        shutil.copyfile(tokenizer, folder / "tokenizer.model")
    else:
        import sentencepiece as spm

        corpus = folder / "corpus.txt"
        corpus.write_text("\n".join(f"the quick brown fox {i} jumps over" for i in range(2000)))
        spm.SentencePieceTrainer.train(
            input=str(corpus), model_prefix=str(folder / "tokenizer"), vocab_size=64,
            model_type="bpe", bos_id=1, eos_id=2, unk_id=0,
        )  # fmt: skip
    return folder


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("llama_cpp", type=Path)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--outtype", default="q8_0")
    p.add_argument("--tokenizer", type=Path)
    args = p.parse_args()
    import gguf

    folder = make_model(args.hidden, args.layers, args.tokenizer)
    ours, theirs = DATA / "ours.gguf", DATA / "theirs.gguf"
    env = {**os.environ, "PYTHONPATH": str(args.llama_cpp / "gguf-py")}
    our_cmd = [sys.executable, "-m", "ckpt_explorer", "convert", str(folder), str(ours)]
    our_cmd += ["--to", "gguf", "--dtype", args.outtype, "--overwrite"]
    their_cmd = [sys.executable, str(args.llama_cpp / "convert_hf_to_gguf.py"), str(folder)]
    their_cmd += ["--outtype", args.outtype, "--outfile", str(theirs)]
    times: dict[str, list[float]] = {"ours": [], "llama.cpp": []}
    for _ in range(2):  # the first round warms the page cache and the imports
        times["ours"].append(timed(our_cmd))
        times["llama.cpp"].append(timed(their_cmd, env))
    a = {t.name: bytes(t.data) for t in gguf.GGUFReader(str(ours)).tensors}
    b = {t.name: bytes(t.data) for t in gguf.GGUFReader(str(theirs)).tensors}
    size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    print(f"source {size / 2**20:.0f} MiB float32, {len(a)} tensors, outtype {args.outtype}")
    print(f"same tensors, byte for byte: {a == b}")
    print(f"ckpt-explorer convert (written + verified): {times['ours'][-1]:.2f} s")
    print(f"llama.cpp convert_hf_to_gguf.py:            {times['llama.cpp'][-1]:.2f} s")
    print(f"ratio ours / llama.cpp: {times['ours'][-1] / times['llama.cpp'][-1]:.2f}")


if __name__ == "__main__":
    main()
