"""WriteBehind: the disk writes of a file being written start in a thread behind the copy."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ckpt_explorer.convert import flush
from ckpt_explorer.convert.flush import WriteBehind


def test_flushes_once_a_step_was_written_and_stops_on_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    flushed = threading.Event()

    def fake_fdatasync(fd: int) -> None:
        calls.append(fd)
        flushed.set()

    monkeypatch.setattr(flush.os, "fdatasync", fake_fdatasync)
    monkeypatch.setattr(WriteBehind, "STEP", 100)
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        behind = WriteBehind(fd)
        behind.wrote(60)
        assert not flushed.wait(0.2), "no flush before a whole step was written"
        behind.wrote(60)
        assert flushed.wait(10), "a flush once a step was written"
        behind.close()
        assert calls and set(calls) == {fd}
        assert not behind._thread.is_alive()
    finally:
        os.close(fd)


def test_a_failing_flush_is_left_to_the_final_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(fd: int) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(flush.os, "fdatasync", failing)
    monkeypatch.setattr(WriteBehind, "STEP", 1)
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        with WriteBehind(fd) as behind:
            behind.wrote(10)
            behind.wrote(10)
        assert not behind._thread.is_alive()
    finally:
        os.close(fd)
