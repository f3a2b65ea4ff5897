"""Whole-process diff of two tiny checkpoints against ``python -c "import torch"``.

    .venv/bin/python bench/bench_small_diff.py [--repeats 7] [--before DIR]

A diff's start-up should be proportional to its work: two 16 KiB safetensors files (and the
same tensors as ``torch.save`` files) must not pay torch's import. Every case is a fresh
process, the cases alternate, each is run ``--repeats`` times; the table gives the median
wall time with its min-max, the median CPU time (user + system, from ``wait4``), peak RSS,
and each median's ratio to ``import torch`` in the same run. ``--before DIR`` adds the same
diffs run from another tree (e.g. ``git archive`` of main) with ``PYTHONPATH=DIR``.

The children write their bytecode under bench/.data/pycache (``PYTHONPYCACHEPREFIX``, as an
installed package has its ``.pyc`` files) so that no case pays for compiling Python sources;
the numba kernels' on-disk cache is filled by one unmeasured diff first (what every diff
after a machine's first sees).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

DATA = Path(__file__).parent / ".data" / "small_diff"
GOAL = 0.5


def make_pairs() -> dict[str, tuple[Path, Path]]:
    """Two 16 KiB bf16 checkpoints (8 tensors, every element changed), as safetensors and
    as ``torch.save`` files."""
    out = {
        "safetensors": (DATA / "a.safetensors", DATA / "b.safetensors"),
        "bin": (DATA / "a.bin", DATA / "b.bin"),
    }
    if all(p.exists() for pair in out.values() for p in pair):
        return out
    import torch
    from safetensors.torch import save_file

    DATA.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(1)
    sd = {f"w{i}": torch.randn(32, 32, generator=gen).to(torch.bfloat16) for i in range(8)}
    sd2 = {k: v + 1e-2 for k, v in sd.items()}
    save_file(sd, str(out["safetensors"][0]))
    save_file(sd2, str(out["safetensors"][1]))
    torch.save(sd, out["bin"][0])
    torch.save(sd2, out["bin"][1])
    return out


def cli() -> list[str]:
    script = Path(sys.executable).with_name("ckpt-explorer")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ckpt_explorer"]


def child_env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(DATA.parent / "pycache")
    env.update(extra or {})
    return env


def _hwm(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MiB) of one fresh process; peak RSS is its VmHWM sampled
    every 2 ms (``ru_maxrss`` would count the forked parent's pages)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd="/"
    )  # fmt: skip
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _hwm(proc.pid))
            time.sleep(0.002)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    th.join()
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed: {err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, peak[0] / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--before", type=Path, help="another tree to run the diffs from")
    args = parser.parse_args()
    pairs = make_pairs()
    py = sys.executable
    cases: dict[str, tuple[list[str], dict[str, str]]] = {
        "python -c 'import torch'": ([py, "-c", "import torch"], child_env(None)),
        "python -c 'pass'": ([py, "-c", "pass"], child_env(None)),
        "python -c 'import numba'": ([py, "-c", "import numba"], child_env(None)),
    }
    trees = {"": None} if args.before is None else {"": None, "before: ": args.before}
    for prefix, tree in trees.items():
        extra = {"PYTHONPATH": str(tree.resolve())} if tree is not None else None
        for fmt, (a, b) in pairs.items():
            cmd = [*cli(), "diff", str(a), str(b)]
            cases[f"{prefix}diff {fmt}"] = (cmd, child_env(extra))
        if tree is None:
            a, b = pairs["safetensors"]
            cmd = [*cli(), "diff", str(a), str(b)]
            cases["diff safetensors, torch ops"] = (
                cmd,
                child_env({"CKPT_EXPLORER_KERNEL": "torch"}),
            )
    for cmd, env in cases.values():  # bytecode and numba's kernel cache, once, unmeasured
        run(cmd, env)
    got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in cases}
    for _ in range(args.repeats):
        for label, (cmd, env) in cases.items():
            got[label].append(run(cmd, env))
    base_wall = statistics.median(w for w, _, _ in got["python -c 'import torch'"])
    base_cpu = statistics.median(c for _, c, _ in got["python -c 'import torch'"])
    load = os.getloadavg()
    print(f"{args.repeats} alternating rounds, fresh process per case, load {load[0]:.1f}")
    print(
        f"{'case':34} {'wall s (min-max)':>22} {'CPU s':>7} {'VmHWM MiB':>11} "
        f"{'x torch wall':>13} {'x torch CPU':>12}"
    )
    for label, values in got.items():
        walls = [w for w, _, _ in values]
        cpu = statistics.median(c for _, c, _ in values)
        rss = statistics.median(r for _, _, r in values)
        wall = statistics.median(walls)
        span = f"{wall:.3f} ({min(walls):.3f}-{max(walls):.3f})"
        print(
            f"{label:34} {span:>22} {cpu:7.3f} {rss:11.0f} "
            f"{wall / base_wall:13.3f} {cpu / base_cpu:12.3f}"
        )
    diff = got["diff safetensors"]
    ratio = statistics.median(w for w, _, _ in diff) / base_wall
    ratio_cpu = statistics.median(c for _, c, _ in diff) / base_cpu
    print(
        f"diff safetensors / import torch: {ratio:.3f} wall, {ratio_cpu:.3f} CPU "
        f"(goal <= {GOAL}: {ratio <= GOAL})"
    )


if __name__ == "__main__":
    main()
