"""Time and peak memory of ``ckpt-explorer inspect`` on each pickle bomb of the hostile corpus.

``python tests/hostile/measure_bombs.py OUT_DIR`` writes the corpus to OUT_DIR, opens its good
torch file three times as the baseline, then runs every bomb once in a fresh process and
prints the extra time over the baseline, the child's peak RSS (``wait4``) and the exit code.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from make_corpus import make


def run(path: Path) -> tuple[float, float, int]:
    """(seconds, peak RSS MiB, exit code) of one ``inspect --json`` in a fresh process."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckpt_explorer", "inspect", str(path), "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    return time.monotonic() - start, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main(out: Path) -> None:
    cases = make(out)
    base = [run(out / "_good.pt") for _ in range(3)]
    base_s = statistics.median(s for s, _, _ in base)
    print(f"baseline (good file): {base_s:.2f} s, {max(m for _, m, _ in base):.0f} MiB")
    for name, case in cases.items():
        if name.startswith("torch pickle bomb"):
            seconds, mib, code = run(out / case["path"])
            print(f"{seconds - base_s:+6.2f} s  {mib:6.0f} MiB  exit {code}  {name}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
