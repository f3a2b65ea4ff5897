"""Listing a GGUF header-first against gguf's own GGUFReader and ``gguf_dump``.

    .venv/bin/python bench/bench_gguf.py [--blocks 32] [--vocab 128000] [--repeats 7]

Writes, under bench/.data/gguf/ (git-ignored), a LLaMA-shaped GGUF with gguf's GGUFWriter
(``--blocks`` layers of 9 tensors at hidden 1024, Q8_0 matrices and F32 norms, a tokenizer of
``--vocab`` tokens with scores and types: the arrays a real export's header holds) and a
safetensors file of the same tensors in F16. Then, alternating, median of ``--repeats``:

in process (the header parsed afresh each time)
  - ckpt_explorer's listing of the GGUF (``open_checkpoint``: header, records, metadata),
  - ``gguf.GGUFReader(path)`` (what gguf_dump and transformers build on),
  - ckpt_explorer's listing of the safetensors file (the goal: a GGUF lists as fast);
whole process
  - ``ckpt-explorer inspect FILE`` against ``python -m gguf.scripts.gguf_dump FILE``.

Prints each median and the ratios, measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

DATA = Path(__file__).parent / ".data" / "gguf"


def make_data(blocks: int, vocab: int) -> tuple[Path, Path]:
    import gguf
    import numpy as np
    import torch
    from safetensors.torch import save_file

    path, st = DATA / f"llama-{blocks}-{vocab}.gguf", DATA / f"llama-{blocks}.safetensors"
    if path.exists() and st.exists():
        return path, st
    DATA.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    h, ffn = 1024, 2816
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(blocks)
    w.add_context_length(4096)
    w.add_embedding_length(h)
    w.add_head_count(16)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"token-{i}" for i in range(vocab)])
    w.add_token_scores([float(-i) for i in range(vocab)])
    w.add_token_types([1] * vocab)
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    tensors: dict[str, torch.Tensor] = {}

    def add(name: str, shape: tuple[int, ...]) -> None:
        x = rng.standard_normal(shape, dtype=np.float32)
        tensors[name] = torch.from_numpy(x).half()
        if len(shape) == 1:
            w.add_tensor(name, x)
        else:
            q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    for b in range(blocks):
        for name, shape in (
            ("attn_norm", (h,)),
            ("attn_q", (h, h)),
            ("attn_k", (h // 4, h)),
            ("attn_v", (h // 4, h)),
            ("attn_output", (h, h)),
            ("ffn_norm", (h,)),
            ("ffn_gate", (ffn, h)),
            ("ffn_up", (ffn, h)),
            ("ffn_down", (h, ffn)),
        ):
            add(f"blk.{b}.{name}.weight", shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_file(tensors, str(st))
    return path, st


def median_s(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=128000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    path, st = make_data(args.blocks, args.vocab)

    import gguf

    from ckpt_explorer.api import open_checkpoint
    from ckpt_explorer.readers import safetensors_file
    from ckpt_explorer.readers.gguf import file as gguf_file

    def ours() -> None:
        gguf_file._cached_header.cache_clear()
        view = open_checkpoint(path)
        assert len(view.names()) == 9 * args.blocks

    def reader() -> None:
        r = gguf.GGUFReader(str(path))
        assert len(r.tensors) == 9 * args.blocks

    def st_listing() -> None:
        safetensors_file._cached_header.cache_clear()
        assert len(open_checkpoint(st).names()) == 9 * args.blocks

    rows = {
        "ckpt_explorer GGUF listing": median_s(ours, args.repeats),
        "gguf.GGUFReader": median_s(reader, args.repeats),
        "ckpt_explorer safetensors listing": median_s(st_listing, args.repeats),
    }
    exe = Path(sys.executable).parent
    procs = {
        "ckpt-explorer inspect": [str(exe / "ckpt-explorer"), "inspect", str(path)],
        "gguf_dump": [sys.executable, "-m", "gguf.scripts.gguf_dump", str(path)],
    }
    for label, cmd in procs.items():
        rows[label + " (process)"] = median_s(
            lambda cmd=cmd: subprocess.run(cmd, check=True, capture_output=True), args.repeats
        )
    print(f"{path.name}: {path.stat().st_size / 2**20:.0f} MiB, {9 * args.blocks} tensors, "
          f"{args.vocab} tokens")  # fmt: skip
    for label, s in rows.items():
        print(f"  {label:40} {s * 1000:9.1f} ms")
    ours_s = rows["ckpt_explorer GGUF listing"]
    print(f"  GGUFReader / ours           {rows['gguf.GGUFReader'] / ours_s:6.1f}x")
    print(
        f"  ours / safetensors listing  {ours_s / rows['ckpt_explorer safetensors listing']:6.2f}x"
    )
    print(
        "  gguf_dump / inspect (process) "
        f"{rows['gguf_dump (process)'] / rows['ckpt-explorer inspect (process)']:6.1f}x"
    )


if __name__ == "__main__":
    main()
