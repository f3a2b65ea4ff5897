"""Diff benchmark: ckpt_explorer's diff against reading the bytes raw and the naive torch loop.

    .venv/bin/python bench/bench_diff.py [--rounds 3] [--layers 8] [--skip-naive-cold]
        [--naive-rounds N] [--changed few|all] [--cases raw,diff,naive] [--json-out FILE]
    .venv/bin/python bench/bench_diff.py --kernels [--elements N]
    python bench/bench_diff.py --device cuda --layers 36 --changed all --formats safetensors \
        --cases raw,diff,diff_cpu --rounds 2 [--chunk-bytes N] [--data-dir DIR]

Writes two ~1 GB bf16 checkpoints (A and B, B with a few planted differences) as safetensors
and as torch ``.bin`` under ``bench/.data/diff/`` (kept between runs), then measures, each
case in a fresh process, alternating, ``--rounds`` times, cold (``posix_fadvise DONTNEED`` on
every file first) and warm (files read once first):

- ``raw``:   read both files with ``read()`` in 64 MiB blocks (the read limit);
- ``naive``: load both whole (``torch.load(weights_only=True)`` / ``safetensors.load_file``)
             and loop with torch ops computing the same float64 figures;
- ``diff``:  ``ckpt_explorer.diff_checkpoints(a, b)`` (the fused numba kernel when installed);
- ``diff_torch``: the same with ``CKPT_EXPLORER_KERNEL=torch`` (the torch-ops fallback);
- ``diff_cpu``: ``diff_checkpoints(a, b, device="cpu")`` whatever ``--device`` says;
- ``stage1`` / ``stage4`` (CUDA only): the GPU diff's data movement without arithmetic,
  mmapped file -> pinned slots -> device in 2 MiB pieces, filled by 1 / 4 threads.

``--device cuda`` runs the ``diff`` case on the GPU (the engine's pinned staging through 4
pinned host slots and its read-ahead of the next file ranges; CUDA start-up counted as import
time), prints GB/s (bytes of both files / seconds) and checks the GPU targets: cold
diff >= 0.95x the cold raw read rate, warm diff >= 8 GB/s. Without CUDA it prints
"skipped: no CUDA" and writes nothing. ``--layers 36`` makes two ~3.9 GB files.

Times are of the work inside the process (imports excluded; import time reported apart: for
the diff cases it includes importing numba and loading the cached kernels, ``kernel.warm_up``).
``--kernels`` instead measures, in this process on an in-memory bf16 pair, the element pairs
per second of each way to compute the figures (torch float64 ops as before, torch ops on two
threads, the numba kernel on one and on two threads) and checks they agree.
Memory: peak RssAnon sampled every ~5 ms in a background thread, and VmHWM (which also counts
mmapped file pages). Prints a table and ratios; ``--markdown`` prints the BENCHMARKS.md section.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# the repository first: the editable install can resolve ckpt_explorer as a namespace package
sys.path.insert(0, str(HERE.parent))
DATA = HERE / ".data" / "diff"
BLOCK = 64 * 2**20
DEVICE = "cpu"  # the diff case's device (--device)
CHUNK_BYTES: int | None = None  # --chunk-bytes; the engine's default when None


# ---- data ---------------------------------------------------------------------------------
def state_dict(layers: int, seed: int) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(seed)
    hidden, inter, vocab = 2048, 5632, 32000

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    sd = {"model.embed_tokens.weight": w(vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[p + f"self_attn.{n}.weight"] = w(hidden, hidden)
        sd[p + "mlp.gate_proj.weight"] = w(inter, hidden)
        sd[p + "mlp.up_proj.weight"] = w(inter, hidden)
        sd[p + "mlp.down_proj.weight"] = w(hidden, inter)
        sd[p + "input_layernorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
        sd[p + "post_attention_layernorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    sd["model.norm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    sd["lm_head.weight"] = w(vocab, hidden)
    return sd


def plant(sd: dict[str, Any]) -> dict[str, Any]:
    """B = A with three changed tensors: a few elements, small noise everywhere, a norm."""
    import torch

    b = dict(sd)
    g = torch.Generator().manual_seed(99)
    q = b["model.layers.3.self_attn.q_proj.weight"].clone()
    q[::512, ::512] += 0.01
    b["model.layers.3.self_attn.q_proj.weight"] = q
    d = b["model.layers.5.mlp.down_proj.weight"]
    b["model.layers.5.mlp.down_proj.weight"] = (
        d.float() + 1e-3 * torch.randn(d.shape, generator=g)
    ).to(torch.bfloat16)
    b["model.norm.weight"] = b["model.norm.weight"] * 1.5
    return b


def plant_everywhere(sd: dict[str, Any]) -> dict[str, Any]:
    """B = A after "a few more training steps": small noise on every tensor."""
    import torch

    g = torch.Generator().manual_seed(7)
    return {
        k: (v.float() + 1e-4 * torch.randn(v.shape, generator=g)).to(v.dtype) for k, v in sd.items()
    }


def files(layers: int, changed: str = "few") -> dict[str, tuple[Path, Path]]:
    """The pair of files of each format (under ``DATA``; ``--data-dir`` moves it)."""
    tag = "" if changed == "few" else f"-{changed}"
    return {
        "safetensors": (DATA / f"a-{layers}.safetensors", DATA / f"b-{layers}{tag}.safetensors"),
        "bin": (DATA / f"a-{layers}.bin", DATA / f"b-{layers}{tag}.bin"),
    }


def make_data(
    layers: int, changed: str = "few", formats: tuple[str, ...] = ("safetensors", "bin")
) -> dict[str, tuple[Path, Path]]:
    out = {k: v for k, v in files(layers, changed).items() if k in formats}
    if all(p.is_file() for pair in out.values() for p in pair):
        return out
    import torch
    from safetensors.torch import save_file

    DATA.mkdir(parents=True, exist_ok=True)
    a = state_dict(layers, 0)
    b = plant(a) if changed == "few" else plant_everywhere(a)
    if "safetensors" in out:
        save_file(a, str(out["safetensors"][0]))
        save_file(b, str(out["safetensors"][1]))
    if "bin" in out:
        torch.save(a, out["bin"][0])
        torch.save(b, out["bin"][1])
    return out


# ---- the cases (run in a child process) ---------------------------------------------------
class AnonSampler:
    """Peak RssAnon of this process, sampled every ``period`` seconds."""

    def __init__(self, period: float = 0.005) -> None:
        self.period = period
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def status(field: str) -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.status("RssAnon"))
            time.sleep(self.period)

    def __enter__(self) -> AnonSampler:
        self.peak = self.status("RssAnon")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.status("RssAnon"))


def case_raw(a: Path, b: Path) -> dict[str, Any]:
    buf = bytearray(BLOCK)
    n = 0
    for p in (a, b):
        with open(p, "rb", buffering=0) as f:
            while True:
                k = f.readinto(buf)
                if not k:
                    break
                n += k
    return {"bytes": n}


def case_naive(a: Path, b: Path) -> dict[str, Any]:
    import torch

    if a.suffix == ".safetensors":
        from safetensors.torch import load_file

        sa, sb = load_file(str(a)), load_file(str(b))
    else:
        sa = torch.load(a, weights_only=True)
        sb = torch.load(b, weights_only=True)
    changed = 0
    for name, ta in sa.items():
        tb = sb[name]
        x, y = ta.double(), tb.double()
        d = (y - x).abs()
        figures = [
            d.max().item(),
            d.mean().item(),
            (torch.linalg.vector_norm(y - x) / torch.linalg.vector_norm(x)).item(),
            torch.nn.functional.cosine_similarity(x.flatten(), y.flatten(), dim=0).item(),
            int((d > 0).sum()),
            int(torch.isnan(x).sum()),
            int(torch.isnan(y).sum()),
            int(torch.isinf(x).sum()),
            int(torch.isinf(y).sum()),
        ]
        changed += figures[4] > 0
    return {"changed": changed}


def case_diff(a: Path, b: Path, device: str | None = None) -> dict[str, Any]:
    from ckpt_explorer import diff_checkpoints
    from ckpt_explorer.diff.engine import DEFAULT_CHUNK_BYTES

    device = device or os.environ.get("BENCH_DIFF_DEVICE", "cpu")
    chunk = int(os.environ.get("BENCH_DIFF_CHUNK", DEFAULT_CHUNK_BYTES))
    r = diff_checkpoints(a, b, device=device, chunk_bytes=chunk)
    s = r.summary()
    return {"changed": s["changed"], "identical": s["identical"], "device": r.options["device"]}


def case_diff_cpu(a: Path, b: Path) -> dict[str, Any]:
    return case_diff(a, b, "cpu")


def case_stage(a: Path, b: Path, threads: int) -> dict[str, Any]:
    """The GPU diff's data movement alone: mmapped file -> pinned slot -> device, 2 MiB pieces
    (the engine's float chunk of bf16), ``threads`` threads filling slots, no arithmetic.
    One thread is what the engine does today; more shows what parallel staging would give."""
    import warnings
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import torch

    warnings.filterwarnings("ignore", "The given NumPy array is not writable")
    piece = 2 * 2**20
    torch.set_num_threads(1)
    slots = [torch.empty(piece, dtype=torch.uint8).pin_memory() for _ in range(2 * threads)]
    dev = torch.empty(piece, dtype=torch.uint8, device="cuda")
    events: list[Any] = [None] * len(slots)
    total = 0

    def fill(k: int, src: np.ndarray) -> int:
        torch.set_num_threads(1)  # as the engine's staging workers
        if events[k] is not None:
            events[k].synchronize()  # that slot's last copy has left
        n = len(src)
        slots[k][:n].copy_(torch.from_numpy(src))
        return n

    with ThreadPoolExecutor(threads) as pool:
        for p in (a, b):
            m = np.memmap(p, dtype=np.uint8, mode="r")
            starts = range(0, len(m), piece)
            window: list[Any] = []
            for j, i in enumerate(starts):
                k = j % len(slots)
                window.append((k, pool.submit(fill, k, m[i : i + piece])))
                if len(window) < len(slots) - 1:
                    continue
                k0, fut = window.pop(0)
                n = fut.result()
                dev[:n].copy_(slots[k0][:n], non_blocking=True)
                events[k0] = torch.cuda.Event()
                events[k0].record()
                total += n
            for k0, fut in window:
                n = fut.result()
                dev[:n].copy_(slots[k0][:n], non_blocking=True)
                events[k0] = torch.cuda.Event()
                events[k0].record()
                total += n
            del m
    torch.cuda.synchronize()
    return {"bytes": total, "threads": threads}


def child(case: str, a: Path, b: Path) -> None:
    t0 = time.perf_counter()
    if case != "raw":
        import torch

        import ckpt_explorer  # noqa: F401
        from ckpt_explorer.diff import kernel

        kernel.warm_up()  # numba's first call loads its registries (~1 s): start-up, not work
        cuda = os.environ.get("BENCH_DIFF_DEVICE", "cpu").startswith("cuda")
        if (case == "diff" and cuda) or case.startswith("stage"):
            # CUDA context and a pinned page: start-up, not work
            torch.empty(1, device="cuda")
            torch.empty(1).pin_memory()
            torch.cuda.synchronize()
    t_import = time.perf_counter() - t0
    with AnonSampler() as sampler:
        base = sampler.peak
        t1 = time.perf_counter()
        cases = {
            "raw": case_raw,
            "naive": case_naive,
            "diff": case_diff,
            "diff_torch": case_diff,
            "diff_cpu": case_diff_cpu,
            "stage1": lambda a, b: case_stage(a, b, 1),
            "stage4": lambda a, b: case_stage(a, b, 4),
        }
        out = cases[case](a, b)
        seconds = time.perf_counter() - t1
    out.update(
        gbps=(a.stat().st_size + b.stat().st_size) / seconds / 1e9,
        seconds=seconds,
        import_s=t_import,
        anon_peak=sampler.peak,
        anon_base=base,
        vmhwm=AnonSampler.status("VmHWM"),
    )
    print(json.dumps(out))


# ---- the parent -------------------------------------------------------------------------------
def drop_cache(paths: list[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm_cache(paths: list[Path]) -> None:
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            buf = bytearray(BLOCK)
            while f.readinto(buf):
                pass


def run_case(case: str, a: Path, b: Path, cold: bool) -> dict[str, Any]:
    (drop_cache if cold else warm_cache)([a, b])
    env = dict(os.environ)
    env.pop("CKPT_EXPLORER_KERNEL", None)
    if case == "diff_torch":
        env["CKPT_EXPLORER_KERNEL"] = "torch"
    env["BENCH_DIFF_DEVICE"] = DEVICE
    if CHUNK_BYTES is not None:
        env["BENCH_DIFF_CHUNK"] = str(CHUNK_BYTES)
    proc = subprocess.run(
        [sys.executable, __file__, "--child", case, str(a), str(b)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    global DATA, DEVICE, CHUNK_BYTES
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--formats", default="safetensors,bin")
    ap.add_argument("--skip-naive-cold", action="store_true", help="naive only warm (slow)")
    ap.add_argument("--naive-rounds", type=int, default=None, help="rounds of naive (slow)")
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument(
        "--changed",
        choices=["few", "all"],
        default="few",
        help="B differs from A in 3 tensors (few) or in every tensor (all)",
    )
    ap.add_argument("--cases", default="raw,diff,naive", help="in this order in each round")
    ap.add_argument("--kernels", action="store_true", help="in-process kernel throughput only")
    ap.add_argument("--elements", type=int, default=64 * 2**20, help="pair size for --kernels")
    ap.add_argument("--device", default="cpu", help="device of the diff case: cpu or cuda[:N]")
    ap.add_argument("--chunk-bytes", type=int, default=None, help="diff_checkpoints chunk_bytes")
    ap.add_argument("--data-dir", type=Path, default=None, help=f"default {DATA}")
    ap.add_argument("--child", nargs=3, metavar=("CASE", "A", "B"))
    args = ap.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return
    if args.kernels:
        kernels(args.elements, args.rounds)
        return
    DEVICE, CHUNK_BYTES = args.device, args.chunk_bytes
    DATA = args.data_dir or DATA
    if DEVICE.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("skipped: no CUDA")
            if args.json_out:
                args.json_out.write_text(json.dumps({"skipped": "no CUDA"}))
            return
    t_data = time.perf_counter()
    data = make_data(args.layers, args.changed, tuple(args.formats.split(",")))
    print(f"data ready in {time.perf_counter() - t_data:.1f} s", flush=True)
    results: dict[str, list[dict[str, Any]]] = {}
    for fmt in args.formats.split(","):
        a, b = data[fmt]
        for temp in ("warm", "cold"):
            cases = args.cases.split(",")
            if temp == "cold" and args.skip_naive_cold and "naive" in cases:
                cases.remove("naive")
            naive_rounds = args.rounds if args.naive_rounds is None else args.naive_rounds
            for r in range(args.rounds):
                for case in cases:
                    if case == "naive" and r >= naive_rounds:
                        continue
                    res = run_case(case, a, b, temp == "cold")
                    results.setdefault(f"{fmt}/{temp}/{case}", []).append(res)
                    print(
                        f"{fmt:11} {temp} round {r + 1} {case:10} {res['seconds']:8.3f} s  "
                        f"{res['gbps']:6.2f} GB/s  "
                        f"anon peak {res['anon_peak'] / 2**20:7.0f} MiB",
                        flush=True,
                    )
    summary = summarise(results, data)
    if DEVICE.startswith("cuda"):
        summary["gpu_targets"] = gpu_targets(summary, data)
    print(json.dumps(summary, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps({"runs": results, "summary": summary}, indent=2))


def summarise(results: dict[str, list[dict[str, Any]]], data: dict[str, Any]) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {}
    for key, runs in results.items():
        out[key] = {
            "median_s": statistics.median(r["seconds"] for r in runs),
            "anon_peak_mib": max(r["anon_peak"] for r in runs) / 2**20,
            "anon_base_mib": max(r["anon_base"] for r in runs) / 2**20,
            "vmhwm_mib": max(r["vmhwm"] for r in runs) / 2**20,
            "import_s": statistics.median(r["import_s"] for r in runs),
            "gbps": statistics.median(r["gbps"] for r in runs),
            "device": runs[0].get("device"),
        }
    for fmt in data:
        for temp in ("warm", "cold"):
            d = out.get(f"{fmt}/{temp}/diff")
            raw = out.get(f"{fmt}/{temp}/raw")
            naive = out.get(f"{fmt}/{temp}/naive")
            for case in ("diff", "diff_torch", "diff_cpu"):
                c = out.get(f"{fmt}/{temp}/{case}")
                if c and raw:
                    c["x_raw"] = c["median_s"] / raw["median_s"]
            if d and naive:
                d["naive_over_diff"] = naive["median_s"] / d["median_s"]
                naive["x_raw"] = naive["median_s"] / raw["median_s"] if raw else None
    out["torch"] = torch.__version__
    out["device"] = DEVICE
    return out


def gpu_targets(summary: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """The GPU targets: cold diff >= 0.95x the cold raw read rate, warm >= 8 GB/s."""
    out: dict[str, Any] = {}
    for fmt in data:
        cold, cold_raw = summary.get(f"{fmt}/cold/diff"), summary.get(f"{fmt}/cold/raw")
        warm = summary.get(f"{fmt}/warm/diff")
        if cold and cold_raw:
            ratio = cold["gbps"] / cold_raw["gbps"]
            out[f"{fmt}/cold_rate_over_disk"] = {
                "value": ratio,
                "target": 0.95,
                "met": ratio >= 0.95,
            }
        if warm:
            out[f"{fmt}/warm_gbps"] = {
                "value": warm["gbps"],
                "target": 8.0,
                "met": warm["gbps"] >= 8,
            }
        raw_warm = summary.get(f"{fmt}/warm/raw")
        if cold_raw and raw_warm:  # near 1: the cache drop did not work, "cold" is not cold
            out[f"{fmt}/cold_raw_over_warm_raw"] = cold_raw["gbps"] / raw_warm["gbps"]
    for k, v in out.items():
        if not isinstance(v, dict):
            print(f"{k}: {v:.3f}")
            continue
        print(
            f"target {k}: {v['value']:.3f} (target {v['target']}) {'MET' if v['met'] else 'NOT MET'}"
        )
    return out


# ---- --kernels: in-process throughput of the ways to compute the figures -------------------
def kernels(elements: int, rounds: int) -> None:
    import torch

    from ckpt_explorer.diff import kernel
    from ckpt_explorer.diff.engine import Engine
    from ckpt_explorer.diff.stats import ChunkStats, Sums

    g = torch.Generator().manual_seed(0)
    a = (torch.randn(elements, generator=g) * 0.02).to(torch.bfloat16)
    b = (a.float() + 1e-4 * torch.randn(elements, generator=g)).to(torch.bfloat16)
    kernel.warm_up()
    compiled = kernel._nk

    def engine_pass(threads: int, fused: bool) -> list[Any]:
        kernel._nk = compiled if fused else None
        eng = Engine(None, None, threads=threads)  # type: ignore[arg-type]  # float pass only
        with eng._workers():
            f = eng._float_pass(a, b, True).figures()
        return [f.max_abs, f.mean_abs, f.rel_l2, f.cosine, f.n_outside]

    def old_torch() -> list[Any]:
        # the float path before the kernel: ChunkStats.reduce on one thread, chunk by chunk
        torch.set_num_threads(1)
        stats = ChunkStats(2**20, torch.device("cpu"), 0.0, 0.0)
        sums = Sums()
        for i in range(0, elements, 2**20):
            sums.merge(stats.reduce(a[i : i + 2**20], b[i : i + 2**20]).tolist())
        f = sums.figures()
        return [f.max_abs, f.mean_abs, f.rel_l2, f.cosine, f.n_outside]

    ways = {
        "torch float64 ops, 1 thread (before)": old_torch,
        "torch float64 ops, 2 threads (fallback)": lambda: engine_pass(2, False),
        "numba fused kernel, 1 thread": lambda: engine_pass(1, True),
        "numba fused kernel, 2 threads (chosen)": lambda: engine_pass(2, True),
    }
    results: dict[str, list[float]] = {k: [] for k in ways}
    figures: dict[str, list[Any]] = {}
    for _ in range(max(1, rounds)):
        for name, fn in ways.items():  # alternating, several rounds
            t = time.perf_counter()
            figures[name] = fn()
            results[name].append(time.perf_counter() - t)
    kernel._nk = compiled
    print(f"{elements} bf16 element pairs in memory, median of {rounds}:")
    for name, ts in results.items():
        med = statistics.median(ts)
        print(f"  {name:42} {med:7.3f} s  {elements / med / 1e6:7.0f} M pairs/s  {figures[name]}")


if __name__ == "__main__":
    main()
