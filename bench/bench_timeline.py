"""Run-timeline benchmark: one pass over a run against reading its files raw; cached reopen.

    .venv/bin/python bench/bench_timeline.py [--checkpoints 5] [--width 1536] [--rounds 3]

Writes a run under ``bench/.data/timeline/`` (kept between runs) with a plain torch loop: an
MLP of 8 Linear(width, width) layers trained with AdamW + a LambdaLR, saved every few steps as
``step-N/`` = ``model.safetensors`` (safetensors.torch.save_file), ``optimizer.pt``,
``scheduler.pt`` and ``meta.pt`` (step + RNG states), the way such loops save. Then, each case
in a fresh process, alternating, ``--rounds`` times:

- ``raw``: read every file of the run with ``read()`` in 64 MiB blocks, cold (pages dropped
  with ``posix_fadvise(DONTNEED)`` first): the read limit;
- ``timeline``: ``build_timeline(run)`` without cache, cold: one pair pass per consecutive
  pair (the goal: <= 1.2x ``raw``);
- ``reopen``: ``build_timeline(run, cache)`` with the cache filled, cold (goal: < 1 s for a
  run of 20 checkpoints; the work is per checkpoint, so this run's figure scales linearly).

Times exclude imports. Memory: peak RssAnon (sampled every ~5 ms) above the level before the
case. Prints a table and the ratios.
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
DATA = HERE / ".data" / "timeline"


def make_run(run: Path, checkpoints: int, width: int) -> None:
    import random

    import numpy as np
    import torch
    from safetensors.torch import save_file
    from torch import nn

    marker = run / f".done-{checkpoints}-{width}"
    if marker.exists():
        return
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(8)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
    step = 0
    for _ in range(checkpoints):
        for _step in range(2):
            loss = model(torch.randn(4, width)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            sched.step()
            step += 1
        out = run / f"step-{step}"
        out.mkdir(parents=True, exist_ok=True)
        save_file({n: p.detach().contiguous() for n, p in model.state_dict().items()},
                  out / "model.safetensors", metadata={"format": "pt"})  # fmt: skip
        torch.save(opt.state_dict(), out / "optimizer.pt")
        torch.save(sched.state_dict(), out / "scheduler.pt")
        torch.save({"step": step, "epoch": 0, "torch_rng": torch.get_rng_state(),
                    "numpy_rng": np.random.get_state(), "python_rng": random.getstate()},
                   out / "meta.pt")  # fmt: skip
    marker.touch()


def _files(run: Path) -> list[Path]:
    return sorted(p for p in run.rglob("*") if p.is_file() and not p.name.startswith("."))


def _drop(files: list[Path]) -> None:
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class PeakAnon:
    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()

    @staticmethod
    def now() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
        return 0

    def __enter__(self) -> PeakAnon:
        self.base = self.now()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.now())

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self.now())


def child(case: str, run: Path, cache: Path) -> None:
    import torch  # noqa: F401  (imports are not timed)

    from ckpt_explorer.api import open_checkpoint
    from ckpt_explorer.diff import diff_checkpoints, kernel
    from ckpt_explorer.timeline import build_timeline

    kernel.warm_up()
    assert open_checkpoint and diff_checkpoints  # their modules are imported now
    files = _files(run)
    _drop(files)
    with PeakAnon() as mem:
        t0 = time.perf_counter()
        if case == "raw":
            for f in files:
                with open(f, "rb", buffering=0) as fh:
                    while fh.read(64 << 20):
                        pass
            stats: dict[str, int] = {}
        else:
            t = build_timeline(run, cache if case == "reopen" else None)
            stats = t.stats
        seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "anon_mib": (mem.peak - mem.base) / 2**20, **stats}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoints", type=int, default=5)
    ap.add_argument("--width", type=int, default=1536)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return
    run = DATA / f"run-{args.checkpoints}x{args.width}"
    make_run(run, args.checkpoints, args.width)
    cache = DATA / f"cache-{args.checkpoints}x{args.width}"
    total = sum(f.stat().st_size for f in _files(run))
    print(f"run: {args.checkpoints} checkpoints, {total / 2**30:.2f} GiB in all")

    def once(case: str) -> dict[str, Any]:
        cmd = [sys.executable, __file__, "--child", case, str(run), str(cache)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]

    once("reopen")  # fills the cache
    results: dict[str, list[dict[str, Any]]] = {"raw": [], "timeline": [], "reopen": []}
    for _ in range(args.rounds):
        for case in results:
            results[case].append(once(case))
    med = {c: statistics.median(r["seconds"] for r in rs) for c, rs in results.items()}
    print(f"{'case':10} {'median s':>9} {'peak anon MiB':>14}  stats")
    for c, rs in results.items():
        anon = max(r["anon_mib"] for r in rs)
        extra = {k: v for k, v in rs[-1].items() if k not in ("seconds", "anon_mib")}
        print(f"{c:10} {med[c]:9.3f} {anon:14.1f}  {extra or ''}")
    print(f"timeline / raw (cold): {med['timeline'] / med['raw']:.2f}x (goal <= 1.2x)")
    print(f"cached reopen: {med['reopen']:.3f} s for {args.checkpoints} checkpoints")


if __name__ == "__main__":
    main()
