"""Long work off the page's thread: a job runs in a daemon thread with progress and cancel."""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from ..errors import CkptExplorerError
from .owner_thread import mailbox
from .warm_up import working


class Throttle:
    """Calls ``fn`` at most every ``interval`` seconds (the last call of a burst is kept),
    on the thread that made the throttle (:mod:`.owner_thread`)."""

    def __init__(self, fn: Callable[..., Any], interval: float = 0.15) -> None:
        self.fn = fn
        self.interval = interval
        self._last = 0.0
        self._box = mailbox()

    def __call__(self, *args: Any, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last >= self.interval:
            self._last = now
            self._box.call(self.fn, *args)


class Job:
    """One background run of ``work(cancel_event)``.

    ``on_done(result)`` runs with the result; ``on_error(message)`` with a one-line message
    (CkptExplorerError's own line; other exceptions with their type, never a traceback in the
    page). Both run on the thread that made the job when it is a notebook kernel's (its event
    loop runs them, :mod:`.owner_thread`; :meth:`join` there runs them at once), elsewhere in
    the job's thread.

    Example:
        >>> job = Job(lambda cancel: 42, on_done=print, on_error=print)   # doctest: +SKIP
        >>> job.start(); job.join()                                        # doctest: +SKIP
    """

    def __init__(
        self,
        work: Callable[[threading.Event], Any],
        on_done: Callable[[Any], None],
        on_error: Callable[[str], None],
        name: str = "ckpt-explorer-job",
    ) -> None:
        self.cancel_event = threading.Event()
        self._work = work
        self._on_done = on_done
        self._on_error = on_error
        self._box = mailbox()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Job:
        self._thread.start()
        return self

    def cancel(self) -> None:
        self.cancel_event.set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the job; on its owner thread, its result and reports are then delivered."""
        self._thread.join(timeout)
        self._box.drain()

    def _run(self) -> None:
        with working():  # a served dashboard's warm-up waits meanwhile
            self._finish()

    def _finish(self) -> None:
        try:
            result = self._work(self.cancel_event)
        except CkptExplorerError as e:
            self._box.call(self._on_error, e.one_line())
        except Exception as e:  # the page must keep serving whatever the engine raises
            last = traceback.extract_tb(e.__traceback__)[-1:]
            where = f" ({last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno})" if last else ""
            self._box.call(self._on_error, f"{type(e).__name__}: {e}{where}")
        else:
            self._box.call(self._on_done, result)
