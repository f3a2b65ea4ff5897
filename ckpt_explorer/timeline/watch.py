"""``--watch``: poll a run folder, print each new checkpoint and each new anomaly once."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from .build import build_timeline
from .cache import SummaryCache
from .report import anomaly_lines, checkpoint_line

SETTLE_S = 2.0  # a checkpoint modified more recently than this is still being written


def watch(
    run_dir: str | Path,
    cache: SummaryCache,
    interval: float = 5.0,
    emit: Callable[[str], None] = print,
    settle_s: float = SETTLE_S,
    rounds: int | None = None,
) -> int:
    """Poll until interrupted (Ctrl-C) or ``rounds`` polls; returns 1 if an error-level
    anomaly was seen, else 0. Each poll reads only checkpoints not seen before (the cache
    holds the rest)."""
    seen: set[tuple[str, str]] = set()
    told: set[tuple[object, str, str]] = set()
    worst = 0
    n = 0
    try:
        while rounds is None or n < rounds:
            n += 1
            t = build_timeline(run_dir, cache, settle_s=settle_s)
            pairs = {p.path_b: p for p in t.pairs}
            for c in t.checkpoints:
                if (c.path, c.identity) not in seen:
                    seen.add((c.path, c.identity))
                    emit("checkpoint " + checkpoint_line(c, pairs.get(c.path)).strip())
            for a in t.anomalies:
                key = (a.step, a.kind, a.message)
                if key not in told:
                    told.add(key)
                    emit("\n".join(anomaly_lines(a)))
                    worst = max(worst, 1 if a.severity == "error" else 0)
            if rounds is None or n < rounds:
                time.sleep(interval)
    except KeyboardInterrupt:
        emit("stopped")
    return worst
