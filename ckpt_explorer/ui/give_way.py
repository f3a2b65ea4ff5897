"""Background steps that give way to the server's own work.

A served dashboard warms up in a background thread (security verdicts, the statistics
kernels, plotly's figure classes, torch: seconds of a core). Python runs one thread at a time,
so a warm-up step running while a page's session is built or a tab is drawn halves that
work's speed. :func:`in_turn` starts each step only once the process's other threads have
been quiet for a short window, so a page's requests go first and the warm-up fills the gaps
(the browser loading scripts, a person reading the page). A step already running is not
interrupted: steps should be small (an import, a kernel load).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

WINDOW_S = 0.1  # how long the other threads are watched before a step
QUIET_SHARE = 0.2  # of a core: at most this much used by the other threads is quiet
PATIENCE_S = 5.0  # a step waits at most this long for quiet (a busy server still warms up)


def others_busy(window_s: float = WINDOW_S) -> float:
    """The share of a core the process's other threads used over the next ``window_s``
    seconds (this thread sleeps meanwhile)."""
    process, own = time.process_time(), time.thread_time()
    time.sleep(window_s)
    used = (time.process_time() - process) - (time.thread_time() - own)
    return max(0.0, used) / window_s


def wait_quiet(
    window_s: float = WINDOW_S, quiet_share: float = QUIET_SHARE, patience_s: float = PATIENCE_S
) -> bool:
    """Wait until the other threads are quiet for one window; False when ``patience_s``
    passed first."""
    deadline = time.monotonic() + patience_s
    while others_busy(window_s) > quiet_share:
        if time.monotonic() >= deadline:
            return False
    return True


def after_lull(step: Callable[[], Any], lull_s: float) -> Callable[[], Any]:
    """``step``, marked to start only after the other threads were quiet for ``lull_s``
    seconds in a row (a long step a person's next click should not land in)."""

    def run() -> Any:
        return step()

    run.lull_s = lull_s  # type: ignore[attr-defined]
    return run


def in_turn(steps: Iterable[Callable[[], Any]], patience_s: float = PATIENCE_S) -> None:
    """Run ``steps`` in order, each once the other threads are quiet for a window (its
    :func:`after_lull` time, if marked), or ``patience_s`` on."""
    for step in steps:
        window = getattr(step, "lull_s", WINDOW_S)
        wait_quiet(window_s=window, patience_s=max(patience_s, window))
        step()
