"""Whole-process ``ckpt-explorer inspect`` of a 1 GiB checkpoint against ``import torch``.

    .venv/bin/python bench/bench_cli_startup.py [--repeats 7] [--size-mb 1024]

Listing must not pay torch's import. Writes a 1 GiB ``torch.save`` ``.bin``
and the same tensors as safetensors under bench/.data/cli_startup/ (git-ignored), then runs,
alternating, each in a fresh process: ``python -c "import torch"``, ``python -c "pass"`` and
``ckpt-explorer inspect`` of each file, cold (the checkpoint's pages dropped with
posix_fadvise first) and warm. Prints medians and the ratio of each inspect to import torch
(goal: at most 0.25). Then a small diff (two 256 KiB bf16 files, every element changed) with
the fused numba kernels as installed (their on-disk cache filled), with an empty
``NUMBA_CACHE_DIR`` (the first diff on a machine: they compile) and with the torch ops
(``CKPT_EXPLORER_KERNEL=torch``): what numba costs a short command.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).parent / ".data" / "cli_startup"
GOAL = 0.25


def make_data(size_mb: int) -> dict[str, Path]:
    out = {"bin": DATA / "model.bin", "safetensors": DATA / "model.safetensors"}
    stamp = DATA / f"size-{size_mb}"
    if stamp.exists() and all(p.exists() for p in out.values()):
        return out
    import torch
    from safetensors.torch import save_file

    DATA.mkdir(parents=True, exist_ok=True)
    per = 8 * 2**20 // 4  # float32 elements of an 8 MiB tensor
    gen = torch.Generator().manual_seed(0)
    sd = {
        f"layers.{i}.weight": torch.randn(per // 1024, 1024, generator=gen)
        for i in range(size_mb // 8)
    }
    torch.save(sd, out["bin"])
    save_file(sd, str(out["safetensors"]), metadata={"format": "pt"})
    for old in DATA.glob("size-*"):
        old.unlink()
    stamp.touch()
    return out


def make_small_pair() -> tuple[Path, Path]:
    """Two 256 KiB safetensors files differing in every element (a small diff)."""
    a, b = DATA / "small_a.safetensors", DATA / "small_b.safetensors"
    if a.exists() and b.exists():
        return a, b
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(1)
    sd = {f"w{i}": torch.randn(128, 128, generator=gen).to(torch.bfloat16) for i in range(8)}
    save_file(sd, str(a))
    save_file({k: v + 1e-2 for k, v in sd.items()}, str(b))
    return a, b


def cli() -> list[str]:
    script = Path(sys.executable).with_name("ckpt-explorer")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ckpt_explorer"]


def drop_pages(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed(cmd: list[str], cold: Path | None, env: dict[str, str] | None = None) -> float:
    if cold is not None:
        drop_pages(cold)
    if env and "NUMBA_CACHE_DIR" in env:  # an empty cache: the kernels compile on first use
        shutil.rmtree(env["NUMBA_CACHE_DIR"], ignore_errors=True)
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    took = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--size-mb", type=int, default=1024)
    args = parser.parse_args()
    files = make_data(args.size_mb)
    cases: dict[str, tuple[list[str], Path | None, dict[str, str] | None]] = {
        "python -c 'import torch'": ([sys.executable, "-c", "import torch"], None, None),
        "python -c 'pass'": ([sys.executable, "-c", "pass"], None, None),
    }
    for label, path in files.items():
        for temp in ("cold", "warm"):
            cases[f"inspect {label} ({temp})"] = (
                [*cli(), "inspect", str(path)],
                path if temp == "cold" else None,
                None,
            )
    a, b = make_small_pair()
    small = [*cli(), "diff", str(a), str(b)]
    empty = str(DATA / "numba-cache-empty")
    cases["diff 2 x 256 KiB, numba"] = (small, None, None)
    cases["diff 2 x 256 KiB, numba compiling"] = (small, None, {"NUMBA_CACHE_DIR": empty})
    cases["diff 2 x 256 KiB, torch ops"] = (small, None, {"CKPT_EXPLORER_KERNEL": "torch"})
    for path in files.values():  # warm the files once, and the interpreter's own modules
        timed([*cli(), "inspect", str(path)], None)
    timed([sys.executable, "-c", "import torch"], None)
    timed(small, None)  # the kernels' on-disk cache (cache=True) filled once
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.repeats):
        for label, (cmd, cold, env) in cases.items():
            times[label].append(timed(cmd, cold, env))
    torch_s = statistics.median(times["python -c 'import torch'"])
    sizes = ", ".join(f"{k} {p.stat().st_size / 2**30:.2f} GiB" for k, p in files.items())
    print(f"files: {sizes}; {args.repeats} repeats, medians, one fresh process per run")
    print(f"{'case':34} {'median s':>9} {'min s':>7} {'x import torch':>15}")
    for label, values in times.items():
        med = statistics.median(values)
        print(f"{label:34} {med:9.3f} {min(values):7.3f} {med / torch_s:15.3f}")
    worst = max(statistics.median(v) / torch_s for k, v in times.items() if k.startswith("inspect"))
    print(f"worst inspect / import torch = {worst:.3f} (goal <= {GOAL}: {worst <= GOAL})")
    med = {k: statistics.median(v) for k, v in times.items()}
    fused, torch_ops = med["diff 2 x 256 KiB, numba"], med["diff 2 x 256 KiB, torch ops"]
    compiling = med["diff 2 x 256 KiB, numba compiling"]
    print(f"small diff: numba {fused:.3f} s vs torch ops {torch_ops:.3f} s "
          f"({fused - torch_ops:+.3f} s: numba import + cached kernels); the first diff on a "
          f"machine compiles them once: {compiling - fused:+.3f} s")  # fmt: skip


if __name__ == "__main__":
    main()
