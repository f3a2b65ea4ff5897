"""Validation speed against a raw read of the same file, measured side by side in one run.

    .venv/bin/python bench/bench_validate.py [--repeats 3]

Uses the 1 GiB files that bench/bench_listing.py writes to bench/.data/ (run it first, or this
script writes them the same way). Each case runs in a fresh process, cases alternate within a
round, cold (pages dropped with posix_fadvise) and warm; prints medians and ratios. Memory is
peak RssAnon above the level before the case.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

CASE_CODE = r"""
import json, os, sys, threading, time
case, path, cold = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
import torch
import ckpt_explorer
from ckpt_explorer.validate import runner  # imports done before the clock starts
import ckpt_explorer.formats

def rss_anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0

if cold:
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
peak, stop = [0], threading.Event()
def sample():
    while not stop.is_set():
        peak[0] = max(peak[0], rss_anon())
        time.sleep(0.003)
base = rss_anon()
threading.Thread(target=sample, daemon=True).start()
t0 = time.perf_counter()
n = 0
if case == "raw_read":
    with open(path, "rb", buffering=0) as f:
        while True:
            block = f.read(64 * 2**20)
            if not block:
                break
            n += len(block)
elif case == "headers":
    r = runner.validate_checkpoint(path, numeric=False)
    n = len(r.findings)
elif case == "numeric":
    r = runner.validate_checkpoint(path, numeric=True)
    n = len(r.stats)
else:
    raise SystemExit(case)
elapsed = time.perf_counter() - t0
stop.set()
print(json.dumps({"seconds": elapsed, "anon_peak": max(peak[0], rss_anon()) - base, "n": n}))
"""


def run_case(case: str, path: Path, cold: bool) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", CASE_CODE, case, str(path), "1" if cold else "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    from bench_listing import make_data

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    paths = make_data(1024)
    files = {"safetensors": paths["safetensors"], "bin": paths["bin"]}
    results: dict[str, dict[str, list[float]]] = {}
    started = time.time()
    for cold in (True, False):
        for _ in range(args.repeats):
            for fmt, path in files.items():
                for case in ("raw_read", "headers", "numeric"):
                    if not cold:
                        run_case("raw_read", path, False)  # page cache warm
                    r = run_case(case, path, cold)
                    key = f"{fmt}/{case}/{'cold' if cold else 'warm'}"
                    slot = results.setdefault(key, {"seconds": [], "anon_peak": []})
                    slot["seconds"].append(r["seconds"])
                    slot["anon_peak"].append(r["anon_peak"])
    med = {k: {m: statistics.median(v) for m, v in d.items()} for k, d in results.items()}
    print(f"# validation benchmark, {args.repeats} repeats, median; {time.time() - started:.0f}s")
    print(f"{'case':32} {'seconds':>9} {'anon MiB':>9} {'GB/s':>7}")
    for key, m in med.items():
        size = files[key.split("/")[0]].stat().st_size
        print(
            f"{key:32} {m['seconds']:9.4f} {m['anon_peak'] / 2**20:9.1f} "
            f"{size / m['seconds'] / 1e9:7.2f}"
        )
    print("\n# numeric scan time / raw read time (1.0 = streams at the read limit)")
    for fmt in files:
        for temp in ("cold", "warm"):
            raw = med[f"{fmt}/raw_read/{temp}"]["seconds"]
            num = med[f"{fmt}/numeric/{temp}"]["seconds"]
            hdr = med[f"{fmt}/headers/{temp}"]["seconds"]
            print(f"{fmt:12} {temp}: numeric/raw {num / raw:5.2f}x   headers-only {hdr:.4f}s")


if __name__ == "__main__":
    main()
