"""A one-line progress bar for terminals (the CLI draws it on stderr)."""

from __future__ import annotations

from typing import TextIO

from .jobs import ProgressEvent
from .plan import format_bytes


class ProgressBar:
    """Callable progress sink: ``[#####.....]  45%  1.2 GiB/2.6 GiB  model-00002...  ETA 12s``."""

    def __init__(self, stream: TextIO, width: int = 30) -> None:
        self.stream, self.width = stream, width
        self._shown = False

    def __call__(self, e: ProgressEvent) -> None:
        frac = e.bytes_done / e.bytes_total if e.bytes_total else 1.0
        filled = int(frac * self.width)
        eta = f"ETA {e.eta_s:.0f}s" if e.eta_s is not None else ""
        line = (
            f"\r[{'#' * filled}{'.' * (self.width - filled)}] {frac * 100:5.1f}%  "
            f"{format_bytes(e.bytes_done)}/{format_bytes(e.bytes_total)}  "
            f"{e.current_file[-40:]}  {eta}"
        )
        self.stream.write(line.ljust(110)[:110])
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
