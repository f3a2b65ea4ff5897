"""Listing a GGUF header-first, beside the same model as safetensors and each format's own tools.

    .venv/bin/python bench/bench_gguf.py [--blocks 16] [--vocab 128000] [--rounds 5]
        [--only SUBSTR,...]

Writes, under bench/.data/gguf/ (git-ignored), a LLaMA-shaped GGUF with gguf's GGUFWriter
(``--blocks`` layers of 9 tensors at hidden 1024, Q8_0 matrices and F32 norms, a tokenizer of
``--vocab`` tokens with scores and types: the arrays a real export's header holds) and a
safetensors file of the same tensors (same names, same count) in F16. Then, in alternating
rounds (the order rotates each round), each case once per round:

in process (each header parsed afresh: the file's mtime is bumped before each listing)
  - ckpt_explorer's listing of the GGUF (``open_checkpoint``: header, records, metadata),
  - ckpt_explorer's listing of the safetensors file,
  - a ``safe_open`` loop over the safetensors file (keys, dtype, shape: what a user writes),
  - ``gguf.GGUFReader(path)`` (what gguf_dump and transformers build on);
whole process (a fresh interpreter each time)
  - ``ckpt-explorer inspect`` of the GGUF and of the safetensors file,
  - the ``safe_open`` loop as ``python -c``, ``python -m gguf.scripts.gguf_dump`` of the GGUF.

Prints per case the wall median (min-max) and the median CPU (user + system: this process's
``process_time`` in process, ``wait4`` of the child whole process) and the ratios to
ckpt_explorer's safetensors listing of the same kind, measured in the same run. ``--only``
keeps the cases whose label holds one of the given texts (GGUFReader and gguf_dump take
seconds a round on a large vocabulary).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

DATA = Path(__file__).parent / ".data" / "gguf"
SAFE_OPEN = """
import sys
from safetensors import safe_open
with safe_open(sys.argv[1], "numpy") as f:
    rows = [(k, f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in f.keys()]
assert len(rows) == int(sys.argv[2])
"""


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


def bump(path: Path) -> None:
    """A new mtime: the next listing parses the header again (caches key on size and mtime)."""
    now = time.time_ns()
    os.utime(path, ns=(now, now))


def timed_call(fn: Callable[[], object]) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def timed_process(cmd: list[str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read() if proc.stderr else b""
    if status != 0:
        raise SystemExit(f"{cmd} failed ({status}): {err.decode(errors='replace')[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=128000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="", help="comma-separated label texts to keep")
    args = ap.parse_args()
    path, st = make_data(args.blocks, args.vocab)
    n = 9 * args.blocks

    from ckpt_explorer.api import open_checkpoint

    def ours() -> None:
        bump(path)
        assert len(open_checkpoint(path).names()) == n

    def st_listing() -> None:
        bump(st)
        assert len(open_checkpoint(st).names()) == n

    def safe_open_loop() -> None:
        exec(SAFE_OPEN, {"__name__": "bench"})

    def reader() -> None:
        import gguf

        assert len(gguf.GGUFReader(str(path)).tensors) == n

    exe = Path(sys.executable).parent
    cli = str(exe / "ckpt-explorer")
    cases: dict[str, Callable[[], tuple[float, float]]] = {
        "in process: ckpt_explorer safetensors listing": lambda: timed_call(st_listing),
        "in process: ckpt_explorer GGUF listing": lambda: timed_call(ours),
        "in process: safe_open loop": lambda: timed_call(safe_open_loop),
        "in process: gguf.GGUFReader": lambda: timed_call(reader),
        "process: ckpt-explorer inspect safetensors": lambda: timed_process(
            [cli, "inspect", str(st)]
        ),
        "process: ckpt-explorer inspect GGUF": lambda: timed_process([cli, "inspect", str(path)]),
        "process: safe_open loop": lambda: timed_process(
            [sys.executable, "-c", SAFE_OPEN, str(st), str(n)]
        ),
        "process: gguf_dump": lambda: timed_process(
            [sys.executable, "-m", "gguf.scripts.gguf_dump", str(path)]
        ),
    }
    keep = [x for x in args.only.split(",") if x]
    bases = (
        "in process: ckpt_explorer safetensors listing",
        "process: ckpt-explorer inspect safetensors",
    )
    cases = {k: v for k, v in cases.items() if not keep or k in bases or any(x in k for x in keep)}
    sys.argv = ["bench", st.as_posix(), str(n)]  # the in-process safe_open loop's arguments
    for fn in cases.values():  # warm: imports, page cache
        fn()
    wall: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    labels = list(cases)
    for r in range(args.rounds):
        for k in labels[r % len(labels) :] + labels[: r % len(labels)]:
            w, c = cases[k]()
            wall[k].append(w)
            cpu[k].append(c)
    load = os.getloadavg()
    print(f"{path.name}: {path.stat().st_size / 2**20:.0f} MiB GGUF and "
          f"{st.stat().st_size / 2**20:.0f} MiB safetensors, {n} tensors, {args.vocab} tokens, "
          f"{args.rounds} alternating rounds, load {load[0]:.1f} {load[1]:.1f}")  # fmt: skip
    print("| case | wall ms, median (min-max) | CPU ms | x wall | x CPU |")
    print("|---|---:|---:|---:|---:|")
    for k in labels:
        base = bases[0] if k.startswith("in process") else bases[1]
        wm, cm = statistics.median(wall[k]), statistics.median(cpu[k])
        bw, bc = statistics.median(wall[base]), statistics.median(cpu[base])
        print(f"| {k} | {wm * 1000:.1f} ({min(wall[k]) * 1000:.1f}-{max(wall[k]) * 1000:.1f}) "
              f"| {cm * 1000:.1f} | {wm / bw:.2f} | {cm / bc:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
