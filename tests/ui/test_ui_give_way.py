"""Background steps give way to the server's other threads (``ui.give_way``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ckpt_explorer.ui import give_way


@pytest.fixture
def busy() -> Iterator[threading.Event]:
    """Another thread spinning (a page being built) until the event is set."""
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    thread = threading.Thread(target=spin)
    thread.start()
    yield stop
    stop.set()
    thread.join()


@pytest.fixture
def pretend_busy(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The other threads read as busy (a whole core) until the event is set: the waiting
    logic tested without depending on how much CPU a loaded machine gives a spinning thread."""
    quiet = threading.Event()

    def others_busy(window_s: float = give_way.WINDOW_S) -> float:
        time.sleep(min(window_s, 0.05))
        return 0.0 if quiet.is_set() else 1.0

    monkeypatch.setattr(give_way, "others_busy", others_busy)
    return quiet


def test_a_busy_thread_is_seen_and_a_quiet_process_is_not(busy: threading.Event) -> None:
    # a spinning thread gets what a loaded machine leaves it: over a whole second, some share
    assert give_way.others_busy(1.0) > 0.02
    busy.set()
    assert give_way.wait_quiet(patience_s=30.0)


def test_a_step_waits_for_quiet_then_runs_in_order(pretend_busy: threading.Event) -> None:
    busy = pretend_busy
    ran: list[int] = []
    steps = [lambda: ran.append(1), lambda: ran.append(2)]
    worker = threading.Thread(target=give_way.in_turn, args=(steps, 60.0))
    worker.start()
    worker.join(1.0)
    assert ran == []  # the other thread is busy: nothing started
    busy.set()
    worker.join(60.0)
    assert ran == [1, 2]


def test_patience_runs_a_step_on_a_server_that_stays_busy(pretend_busy: threading.Event) -> None:
    assert give_way.wait_quiet(patience_s=0.3) is False


def test_a_step_after_a_lull_waits_for_a_long_quiet(busy: threading.Event) -> None:
    ran: list[str] = []
    steps = [lambda: ran.append("short"), give_way.after_lull(lambda: ran.append("long"), 1.0)]
    worker = threading.Thread(target=give_way.in_turn, args=(steps, 60.0))
    busy.set()  # quiet from now on
    worker.start()
    deadline = time.monotonic() + 60.0
    while not ran and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran == ["short"]  # a tenth of a second of quiet ran it: the long step still waits
    worker.join(60.0)
    assert ran == ["short", "long"]
