"""Listing at frontier scale: whole-process ``inspect`` of DeepSeek-V3 / Llama-3-405B shapes.

    .venv/bin/python bench/bench_frontier.py [--repeats 3] [--layers 61,31,16]
        [--run-files 1000,10000] [--json-out FILE]

Writes (once, under bench/.data/frontier/, sparse: see frontier_maker.py) the DeepSeek-V3
folder at each ``--layers`` (61 = the release: 90,427 tensors in 163 shards) and the
Llama-3-405B folder (1,137 tensors, 191 shards). Then, per folder, each case in a fresh
process, cases alternating, ``--repeats`` rounds, every file's pages dropped first
(``posix_fadvise(DONTNEED)``: cold):

- ``pass``: ``python -c pass`` (the interpreter alone);
- ``safe_open``: a Python loop of ``safetensors.safe_open`` over the shards, keys and
  ``get_slice(k).get_shape()`` (the baseline);
- ``inspect``, ``inspect --json``, ``validate --no-numeric``: ``ckpt-explorer`` itself.

Wall time is taken by the parent, CPU time (user + system) from ``wait4``; memory is the
child's peak ``RssAnon`` (sampled every 2 ms) and its VmHWM (``ru_maxrss``, mapped file pages
included). Per-tensor cost = (case - pass) CPU / tensors, at each size, and the slope of a
least-squares line through the sizes. Each ``ckpt-explorer`` case runs once first, unmeasured,
with bytecode writing on (``PYTHONDONTWRITEBYTECODE`` is dropped), as an installed package
has its modules compiled.

``--run-files``: run folders of N files (bench_timeline's torch loop, 8 x Linear(8, 8): N/4
``step-K/`` checkpoints of model.safetensors, optimizer.pt, scheduler.pt, meta.pt), each
measured once, cold: ``scan RUN``, ``timeline RUN --no-cache``, and reading every file.
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

sys.path.insert(0, str(Path(__file__).parent))
import frontier_maker

DATA = Path(__file__).parent / ".data" / "frontier"
SAFE_OPEN = """
import glob, sys
from safetensors import safe_open
n = 0
for f in sorted(glob.glob(sys.argv[1] + "/*.safetensors")):
    with safe_open(f, "numpy") as h:
        for k in h.keys():
            h.get_slice(k).get_shape()
            n += 1
print(n)
"""
READ_ALL = """
import os, sys
for root, _, names in os.walk(sys.argv[1]):
    for n in names:
        with open(os.path.join(root, n), "rb", buffering=0) as f:
            while f.read(1 << 26):
                pass
"""


ENV = dict(os.environ)  # --pythonpath DIR runs another tree's ckpt_explorer (a "before")
# an installed package has its bytecode compiled; without it every process would compile
# the package's modules again (a warm-up run of each case writes them)
ENV.pop("PYTHONDONTWRITEBYTECODE", None)


def cli() -> list[str]:
    script = Path(sys.executable).with_name("ckpt-explorer")
    if "PYTHONPATH" in ENV or not script.exists():
        return [sys.executable, "-m", "ckpt_explorer"]
    return [str(script)]


def drop_pages(folder: Path) -> None:
    for root, _, names in os.walk(folder):
        for n in names:
            fd = os.open(os.path.join(root, n), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def run_case(
    cmd: list[str], folder: Path, timeout: float = 1800, env: dict[str, str] | None = None
) -> dict[str, float]:
    """Wall seconds, peak RssAnon MiB (sampled) and VmHWM MiB of one fresh process."""
    drop_pages(folder)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env or ENV, cwd="/"
    )
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        status = f"/proc/{proc.pid}/status"
        while not done.is_set():
            try:
                with open(status) as f:
                    for line in f:
                        if line.startswith("RssAnon:"):
                            peak[0] = max(peak[0], int(line.split()[1]))
                            break
            except OSError:
                return
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - t0
    done.set()
    sampler.join()
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} exited {code}: {err[-2000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return {"s": took, "cpu_s": cpu, "anon_mib": peak[0] / 1024, "hwm_mib": usage.ru_maxrss / 1024}


def folder_cases(folder: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "pass": [py, "-c", "pass"],
        "safe_open": [py, "-c", SAFE_OPEN, str(folder)],
        "inspect": [*cli(), "inspect", str(folder)],
        "inspect_json": [*cli(), "inspect", "--json", str(folder)],
        "validate": [*cli(), "validate", "--no-numeric", str(folder)],
    }


TOOL_CASES = ("inspect", "inspect_json", "validate")
BEFORE: dict[str, str] = {}  # --before DIR: the environment that runs that tree's cases


def measure_folder(folder: Path, repeats: int) -> dict[str, dict[str, float]]:
    cases = folder_cases(folder)
    envs = {k: ENV for k in cases}
    if BEFORE:  # the same commands run from the other tree, in the same rounds
        for label in TOOL_CASES:
            cases[label + "_before"] = cases[label]
            envs[label + "_before"] = BEFORE
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in cases}
    for label in cases:
        if label.startswith(TOOL_CASES):
            run_case(cases[label], folder, env=envs[label])  # compile the .pyc files once
    for r in range(repeats):
        for label, cmd in cases.items():
            m = run_case(cmd, folder, env=envs[label])
            runs[label].append(m)
            print(f"  round {r + 1} {label:13} {m['s']:7.3f} s (cpu {m['cpu_s']:6.3f} s)  anon {m['anon_mib']:6.1f} MiB"
                  f"  VmHWM {m['hwm_mib']:6.1f} MiB", flush=True)  # fmt: skip
    return {
        k: {
            "s": statistics.median(x["s"] for x in v),
            "cpu_s": statistics.median(x["cpu_s"] for x in v),
            "anon_mib": max(x["anon_mib"] for x in v),
            "hwm_mib": max(x["hwm_mib"] for x in v),
            "runs": [round(x["s"], 3) for x in v],  # type: ignore[dict-item]
        }
        for k, v in runs.items()
    }


def make_folders(layers: list[int]) -> dict[str, tuple[Path, int]]:
    out = {}
    for n in layers:
        folder = DATA / f"deepseek-v3-{n}"
        stamp = folder / ".made"
        if not stamp.exists():
            info = frontier_maker.make("deepseek-v3", folder, layers=n)
            stamp.write_text(json.dumps(info))
        out[f"deepseek-v3 ({n} layers)"] = (folder, json.loads(stamp.read_text())["tensors"])
    folder = DATA / "llama3-405b"
    stamp = folder / ".made"
    if not stamp.exists():
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps(frontier_maker.make("llama3-405b", folder)))
    out["llama3-405b"] = (folder, json.loads(stamp.read_text())["tensors"])
    return out


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares seconds per tensor through ``(tensors, seconds)``."""
    mx = statistics.fmean(p[0] for p in points)
    my = statistics.fmean(p[1] for p in points)
    num = sum((x - mx) * (y - my) for x, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return num / den if den else float("nan")


def measure_run_folders(sizes: list[int]) -> dict[str, dict[str, float]]:
    from bench_timeline import make_run

    out = {}
    for files in sizes:
        run = DATA / f"run-{files}"
        make_run(run, files // 4, 8)
        n = sum(len(f) for _, _, f in os.walk(run))
        py = sys.executable
        cases = {
            "read_all": [py, "-c", READ_ALL, str(run)],
            "scan": [*cli(), "scan", str(run)],
            "timeline": [*cli(), "timeline", str(run), "--no-cache"],
        }
        for label, cmd in cases.items():
            m = run_case(cmd, run, timeout=3600)
            m["files"] = n
            out[f"run-{files}/{label}"] = m
            print(f"  run folder of {n} files: {label:9} {m['s']:8.2f} s "
                  f"({m['s'] / n * 1e3:.2f} ms a file)  anon {m['anon_mib']:6.1f} MiB", flush=True)  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layers", default="61,31,16", help="DeepSeek-V3 sizes (layers)")
    ap.add_argument("--run-files", default="", help="run folders of these many files, e.g. 10000")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument(
        "--pythonpath", help="a tree whose ckpt_explorer to run (e.g. git archive HEAD)"
    )
    ap.add_argument(
        "--before",
        help="also run the ckpt-explorer cases from this tree (e.g. git archive of main), "
        "alternating with the others in every round (cases named <case>_before)",
    )
    args = ap.parse_args()
    if args.pythonpath:
        ENV["PYTHONPATH"] = args.pythonpath
    if args.before:
        BEFORE.update(ENV, PYTHONPATH=args.before)
        if "PYTHONPATH" not in ENV:  # this tree then runs as the installed package's
            ENV["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    layers = [int(x) for x in args.layers.split(",") if x]
    folders = make_folders(layers)
    results: dict[str, object] = {}
    for label, (folder, tensors) in folders.items():
        print(f"{label}: {tensors} tensors, {len(list(folder.glob('*.safetensors')))} shards")
        m = measure_folder(folder, args.repeats)
        results[label] = {"tensors": tensors, **m}
        base = m["safe_open"]["s"]
        base_cpu, py_cpu = m["safe_open"]["cpu_s"], m["pass"]["cpu_s"]
        for case in [c for c in m if c.startswith(TOOL_CASES)]:
            per = (m[case]["cpu_s"] - py_cpu) / tensors * 1e6
            cpu = m[case]["cpu_s"] / base_cpu
            print(f"  {case:13} {m[case]['s']:.3f} s / cpu {m[case]['cpu_s']:.3f} s = "
                  f"{m[case]['s'] / base:.2f}x / {cpu:.2f}x safe_open "
                  f"({per:.1f} us CPU a tensor over the interpreter)")  # fmt: skip
        print(f"  validate / inspect = {m['validate']['s'] / m['inspect']['s']:.2f}x wall, "
              f"{m['validate']['cpu_s'] / m['inspect']['cpu_s']:.2f}x CPU; safe_open "
              f"{(base_cpu - py_cpu) / tensors * 1e6:.1f} us CPU a tensor")  # fmt: skip
    ds = [(v["tensors"], v) for k, v in results.items() if k.startswith("deepseek")]  # type: ignore[index]
    if len(ds) > 1:
        for case in ("safe_open", "inspect", "inspect_json", "validate"):
            s = slope([(n, v[case]["s"]) for n, v in ds])
            cpu = slope([(n, v[case]["cpu_s"]) for n, v in ds])
            print(f"growth {case:13} {s * 1e6:.2f} us wall, {cpu * 1e6:.2f} us CPU a tensor "
                  f"(least squares over {len(ds)} sizes)")  # fmt: skip
    sizes = [int(x) for x in args.run_files.split(",") if x]
    if sizes:
        results["run_folders"] = measure_run_folders(sizes)
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
