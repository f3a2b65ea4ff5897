"""Listing speed and memory against the baselines, measured side by side in one run.

    .venv/bin/python bench/bench_listing.py [--repeats 3] [--size-mb 1024]

Writes test data under bench/.data/ (git-ignored), then runs every case in a fresh process,
alternating cases, cold (pages dropped with posix_fadvise) and warm, and prints medians and
ratios. Peak memory is anonymous memory (RssAnon) above the process's level before the case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).parent / ".data"

CASE_CODE = r"""
import json, os, sys, threading, time
sys.setrecursionlimit(10000)

def rss_anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0

def vm_hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0

case, path, cold = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
import torch
from safetensors import safe_open
import ckpt_explorer
import ckpt_explorer.formats  # import cost is measured separately, not inside the case
from ckpt_explorer import open_checkpoint

files = [os.path.join(path, f) for f in os.listdir(path)] if os.path.isdir(path) else [path]
if cold:
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)

peak = [0]
stop = threading.Event()
def sample():
    while not stop.is_set():
        peak[0] = max(peak[0], rss_anon())
        time.sleep(0.002)
base = rss_anon()
thread = threading.Thread(target=sample, daemon=True)
thread.start()
t0 = time.perf_counter()
if case == "torch_load":
    sd = torch.load(path, weights_only=True)
    n = len(sd)
elif case == "torch_load_mmap":
    sd = torch.load(path, weights_only=True, mmap=True)
    n = len([(k, v.dtype, tuple(v.shape)) for k, v in sd.items()])
elif case == "safe_open":
    with safe_open(path, framework="pt") as f:
        n = len([(k, f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in f.keys()])
elif case == "safe_open_shards":
    n = 0
    for f in sorted(files):
        if f.endswith(".safetensors"):
            with safe_open(f, framework="pt") as h:
                n += len([(k, h.get_slice(k).get_shape()) for k in h.keys()])
elif case == "ckpt_explorer":
    view = open_checkpoint(path)
    n = len([(r.name, r.dtype, r.shape, r.offset) for r in view.tensors])
else:
    raise SystemExit(f"unknown case {case}")
elapsed = time.perf_counter() - t0
stop.set()
thread.join()
peak[0] = max(peak[0], rss_anon())
print(json.dumps({"seconds": elapsed, "anon_peak": peak[0] - base, "vm_hwm": vm_hwm(), "n": n}))
"""


def make_data(size_mb: int) -> dict[str, Path]:
    import torch
    from safetensors.torch import save_file

    DATA.mkdir(parents=True, exist_ok=True)
    paths = {
        "bin": DATA / f"model-{size_mb}mb.bin",
        "safetensors": DATA / f"model-{size_mb}mb.safetensors",
        "index": DATA / "index-10k",
        "bin10k": DATA / "model-10k-tensors.bin",
    }
    if not paths["bin10k"].exists():  # many small tensors: the pickle parse dominates
        torch.save(
            {
                f"model.layers.{i // 10}.block.{i % 10}.weight": torch.zeros(4, 4)
                for i in range(10_000)
            },
            paths["bin10k"],
        )
    if not paths["bin"].exists() or not paths["safetensors"].exists():
        g = torch.Generator().manual_seed(0)
        per = 8 * 2**20 // 4  # 8 MiB float32 tensors
        sd = {
            f"model.layers.{i}.weight": torch.randn(per // 1024, 1024, generator=g)
            for i in range(size_mb // 8)
        }
        torch.save(sd, paths["bin"])
        save_file(sd, paths["safetensors"])
    if not (paths["index"] / "model.safetensors.index.json").exists():
        folder = paths["index"]
        folder.mkdir(exist_ok=True)
        weight_map = {}
        for shard in range(100):
            name = f"model-{shard + 1:05d}-of-00100.safetensors"
            tensors = {
                f"model.layers.{shard}.block.{j}.weight": torch.zeros(4, 4) for j in range(100)
            }
            save_file(tensors, folder / name)
            weight_map.update(dict.fromkeys(tensors, name))
        total = 10_000 * 64
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
        )
    return paths


def run_case(case: str, path: Path, cold: bool) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", CASE_CODE, case, str(path), "1" if cold else "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(groups: dict[str, list[tuple[str, Path]]], repeats: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, list[float]]] = {}
    for cold in (True, False):
        for _ in range(repeats):
            for group, cases in groups.items():
                for case, path in cases:  # alternate the cases of a group within each round
                    if not cold:
                        run_case(case, path, False)  # warm the page cache first
                    r = run_case(case, path, cold)
                    key = f"{group}/{case}/{'cold' if cold else 'warm'}"
                    slot = results.setdefault(key, {"seconds": [], "anon_peak": [], "vm_hwm": []})
                    for k in slot:
                        slot[k].append(r[k])
    return {k: {m: statistics.median(v) for m, v in d.items()} for k, d in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size-mb", type=int, default=1024)
    args = parser.parse_args()
    paths = make_data(args.size_mb)
    groups = {
        "bin": [
            ("torch_load", paths["bin"]),
            ("torch_load_mmap", paths["bin"]),
            ("ckpt_explorer", paths["bin"]),
        ],
        "safetensors": [
            ("safe_open", paths["safetensors"]),
            ("ckpt_explorer", paths["safetensors"]),
        ],
        "index10k": [("safe_open_shards", paths["index"]), ("ckpt_explorer", paths["index"])],
        "bin10k": [("torch_load_mmap", paths["bin10k"]), ("ckpt_explorer", paths["bin10k"])],
    }
    started = time.time()
    med = measure(groups, args.repeats)
    print(
        f"# listing benchmark, {args.repeats} repeats, median; {time.time() - started:.0f}s in all"
    )
    print(f"{'case':44} {'seconds':>10} {'anon MiB':>9} {'VmHWM MiB':>10}")
    for key, m in med.items():
        print(
            f"{key:44} {m['seconds']:10.4f} {m['anon_peak'] / 2**20:9.1f} {m['vm_hwm'] / 2**20:10.1f}"
        )
    print("\n# ratios (ckpt_explorer listing vs baseline; > 1 means ckpt_explorer is faster)")
    for temp in ("cold", "warm"):
        ce_bin = med[f"bin/ckpt_explorer/{temp}"]["seconds"]
        print(
            f"{temp}: torch.load / listing (.bin)          {med[f'bin/torch_load/{temp}']['seconds'] / ce_bin:8.1f}x  (target >= 50x)"
        )
        print(
            f"{temp}: torch.load(mmap) / listing (.bin)    {med[f'bin/torch_load_mmap/{temp}']['seconds'] / ce_bin:8.2f}x  (target >= 0.5x)"
        )
        ce_st = med[f"safetensors/ckpt_explorer/{temp}"]["seconds"]
        print(
            f"{temp}: safe_open / listing (safetensors)    {med[f'safetensors/safe_open/{temp}']['seconds'] / ce_st:8.2f}x  (target >= 0.5x)"
        )
        ce_b10 = med[f"bin10k/ckpt_explorer/{temp}"]["seconds"]
        print(
            f"{temp}: torch.load(mmap) / listing (10k .bin) {med[f'bin10k/torch_load_mmap/{temp}']['seconds'] / ce_b10:8.2f}x  (target >= 0.5x)"
        )
        ce_ix = med[f"index10k/ckpt_explorer/{temp}"]["seconds"]
        print(f"{temp}: 10k-tensor index listing             {ce_ix:8.3f}s  (target < 1 s)")
    worst = max(m["anon_peak"] for k, m in med.items() if "ckpt_explorer" in k)
    print(
        f"peak anonymous memory of any listing above the interpreter: {worst / 2**20:.1f} MiB (target < 100 MB)"
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
