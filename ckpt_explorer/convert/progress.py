"""A one-line progress bar for terminals (the CLI draws it on stderr)."""

from __future__ import annotations

from typing import TextIO

from ..contracts import Progress
from .plan_types import format_bytes


class ProgressBar:
    """Callable progress sink: ``[#####.....]  45%  1.2 GiB/2.6 GiB  model-00002...  ETA 12s``.

    It draws any engine's :class:`~ckpt_explorer.contracts.Progress` events: amounts in
    bytes as sizes, other units as counts (``3/12 checkpoints``).
    """

    def __init__(self, stream: TextIO, width: int = 30) -> None:
        self.stream, self.width = stream, width
        self._shown = False

    def __call__(self, e: Progress) -> None:
        frac = e.done / e.total if e.total else 1.0
        filled = int(frac * self.width)
        eta = f"ETA {e.eta_s:.0f}s" if e.eta_s is not None else ""
        if e.unit == "bytes":
            amount = f"{format_bytes(e.done)}/{format_bytes(e.total)}"
        else:
            amount = f"{e.done}/{e.total} {e.unit}"
        label = e.item or e.message
        line = (
            f"\r[{'#' * filled}{'.' * (self.width - filled)}] {frac * 100:5.1f}%  "
            f"{amount}  {label[-40:]}  {eta}"
        )
        self.stream.write(line.ljust(110)[:110])
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
