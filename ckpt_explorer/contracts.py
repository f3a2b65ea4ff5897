"""The engines' shared contracts: one progress event, one cancel flag, one report shape.

Every long-running engine (diff, validate, the resume doctor, convert and its distributed
jobs, the timeline build) takes ``progress: ProgressFn | None`` and, where it can stop early,
``cancel: Cancel | None``. The CLI's progress bar and the dashboard consume the same
:class:`Progress` events. Every report the CLI or the dashboard shows follows :class:`Report`:
``to_frame()`` for a table, ``to_json()`` for a plain dict.

Example:
    >>> import threading
    >>> stop = threading.Event()
    >>> def show(p: Progress) -> None:
    ...     print(f"{p.stage}: {p.fraction:.0%} of {p.total} {p.unit}")
    >>> m = Meter(show, "compare", 200, every_s=0.0)
    >>> m.advance(50)
    compare: 25% of 200 bytes
    >>> is_cancelled(stop), is_cancelled(None)
    (False, False)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pandas as pd

UNITS = ("bytes", "tensors", "files", "checkpoints", "pairs")


@dataclass(frozen=True)
class Progress:
    """Where a job stands.

    Attributes:
        stage: what the job is doing: ``"compare"``, ``"scan"``, ``"write"``, ``"verify"``,
            ``"launch"``, ``"open"``, ``"pair"`` ...
        done, total: amounts of ``unit`` done and in all (``total`` 0: not known yet).
        unit: one of :data:`UNITS`.
        item: the file, tensor or checkpoint being worked on ("" when none).
        message: a sentence to show as it is ("" when the numbers say it all).
        eta_s: seconds left at the rate so far (None until there is a rate).
    """

    stage: str
    done: int
    total: int
    unit: str = "bytes"
    item: str = ""
    message: str = ""
    eta_s: float | None = None

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, not {self.unit!r}")

    @property
    def fraction(self) -> float:
        """``done / total`` within [0, 1]; 0 while the total is not known."""
        if self.total <= 0:
            return 0.0
        return min(max(self.done / self.total, 0.0), 1.0)


ProgressFn = Callable[[Progress], None]


@runtime_checkable
class Cancel(Protocol):
    """A cancel request: set means stop (``threading.Event`` is one)."""

    def is_set(self) -> bool: ...


def is_cancelled(cancel: Cancel | None) -> bool:
    """Whether ``cancel`` is given and set."""
    return cancel is not None and cancel.is_set()


@runtime_checkable
class Report(Protocol):
    """An engine's report as the CLI and the dashboard show it."""

    def to_frame(self) -> pd.DataFrame:
        """One row per item of the report (tensor, finding, cause, file ...)."""
        ...

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-ready data (what ``--json`` prints)."""
        ...


class Meter:
    """Sends :class:`Progress` events of one stage to ``progress``, throttled.

    An event goes out when forced, when ``done`` reaches ``total``, or when ``done`` moved by
    at least ``every`` and ``every_s`` seconds passed since the last one. ``eta_s`` comes
    from the rate since the meter started.
    """

    def __init__(
        self,
        progress: ProgressFn | None,
        stage: str,
        total: int,
        unit: str = "bytes",
        *,
        every: int = 1,
        every_s: float = 0.1,
    ) -> None:
        self.progress, self.stage, self.total, self.unit = progress, stage, total, unit
        self.every, self.every_s = max(1, every), every_s
        self.done = 0
        self.item = ""
        self.t0 = time.perf_counter()
        self._last_done = 0
        self._last_t = float("-inf")
        self.sent = 0

    def start(self, item: str) -> None:
        """Work on ``item`` from now on (an event says so)."""
        self.item = item
        self.emit(force=True)

    def advance(self, n: int) -> None:
        self.done += n
        self.emit()

    def emit(self, force: bool = False, message: str = "") -> None:
        if self.progress is None:
            return
        now = time.perf_counter()
        due = self.done - self._last_done >= self.every and now - self._last_t >= self.every_s
        if not (force or due or self.done >= self.total):
            return
        self._last_done, self._last_t = self.done, now
        elapsed = now - self.t0
        eta = elapsed / self.done * max(self.total - self.done, 0) if self.done > 0 else None
        self.sent += 1
        self.progress(
            Progress(self.stage, self.done, self.total, self.unit, self.item, message, eta)
        )
