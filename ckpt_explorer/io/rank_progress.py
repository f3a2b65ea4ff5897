"""Progress of a torchrun job's ranks, relayed to the process that launched it.

The launcher names a folder in the ranks' environment (:data:`PROGRESS_DIR_ENV`); each rank
writes its latest :class:`~ckpt_explorer.contracts.Progress` there as a small JSON file
(replaced atomically), and the launcher, while it waits for the job, reads them and sends one
event for the job: the sums of the ranks' ``done`` and ``total`` once every rank of this
node has reported (over several nodes each launcher relays its own node's ranks).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..contracts import Progress, ProgressFn

PROGRESS_DIR_ENV = "CKPT_EXPLORER_PROGRESS_DIR"
WRITE_EVERY_S = 0.1  # a rank writes at most this often (its last event always)


def rank_progress() -> ProgressFn | None:
    """In a torchrun rank: a sink that writes this rank's events where its launcher reads
    them; None outside a job launched with progress."""
    folder = os.environ.get(PROGRESS_DIR_ENV)
    if not folder:
        return None
    path = Path(folder) / f"rank-{int(os.environ.get('RANK', '0')):05d}.json"
    last = [float("-inf")]

    def write(p: Progress) -> None:
        now = time.monotonic()
        if p.done < p.total and now - last[0] < WRITE_EVERY_S:
            return
        last[0] = now
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(p)))
        os.replace(tmp, path)

    return write


class RankRelay:
    """The launcher's side: :meth:`poll` reads the ranks' files and passes a job event on
    when it changed."""

    def __init__(self, folder: Path, ranks: int, progress: ProgressFn) -> None:
        self.folder, self.ranks, self.progress = folder, ranks, progress
        self._last: tuple[Any, ...] | None = None

    def environment(self) -> dict[str, str]:
        """The variables that make the ranks write their progress here."""
        self.folder.mkdir(parents=True, exist_ok=True)
        return {PROGRESS_DIR_ENV: str(self.folder)}

    def read(self) -> list[Progress]:
        out = []
        for p in sorted(self.folder.glob("rank-*.json")):
            try:
                out.append(Progress(**json.loads(p.read_text())))
            except (OSError, ValueError, TypeError):
                continue  # being replaced: the next poll reads it
        return out

    def poll(self) -> None:
        events = self.read()
        if len(events) < self.ranks:
            return  # a share's total is known once its rank reported
        job = combine(events)
        key = (job.stage, job.done, job.total, job.item)
        if key != self._last:
            self._last = key
            self.progress(job)


def combine(events: list[Progress]) -> Progress:
    """One event for the ranks' events: summed amounts; the stage and item of the rank
    furthest behind; the longest time left."""
    behind = min(events, key=lambda e: e.fraction if e.total else 1.0)  # empty share: done
    etas = [e.eta_s for e in events if e.eta_s is not None]
    return Progress(
        behind.stage,
        sum(e.done for e in events),
        sum(e.total for e in events),
        behind.unit,
        behind.item,
        behind.message,
        max(etas) if len(etas) == len(events) else None,
    )
