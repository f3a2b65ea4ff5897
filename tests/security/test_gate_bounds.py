"""Bounded work: a flood the walk cannot finish is ``unverified``, naming the limit it reached.

The floods are those of bench/bench_gate_hostile.py (which measures time and memory of the real
CLI on full-size ones); here they are small and the limits are made small to match, so every
case reaches a limit whatever the machine's speed. No timing thresholds: the time limit is
tested with a deadline already passed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent.parent / "bench"))

import bench_gate_hostile as hostile

from ckpt_explorer.security import judge_file, judged, pickle_machine

LIMIT_WORDS = ("limit", "opcodes")


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pickle_machine, "MAX_MEMO", 1_000)
    monkeypatch.setattr(pickle_machine, "MAX_STACK", 1_000)
    monkeypatch.setattr(judged, "MAX_FILE_OPS", 100_000)


def test_every_flood_in_every_wrapper_is_unverified_naming_a_limit(
    tmp_path: Path, small_limits: None
) -> None:
    cases = hostile.make(tmp_path, 150_000)
    assert len(cases) == 28
    wrong = []
    for name, path in cases.items():
        v = judge_file(path)
        limits = [r for r in v.reasons if any(w in r for w in LIMIT_WORDS)]
        if v.verdict != "unverified" or not limits:
            wrong.append(f"{name}: {v.verdict} {v.reasons[:2]}")
    assert not wrong, "\n".join(wrong)


def test_the_time_limit_is_a_doubt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(judged, "FILE_SECONDS", -1.0)  # the deadline has passed at the start
    path = tmp_path / "w.pkl"
    path.write_bytes(hostile.floods(10)["memo"])
    v = judge_file(path)
    assert v.verdict == "unverified"
    assert any("time limit" in r for r in v.reasons), v.reasons


def test_the_memory_limit_is_a_doubt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if pickle_machine.anon_memory() is None:
        pytest.skip("no /proc/self/statm here")
    monkeypatch.setattr(judged, "MAX_FILE_MEMORY", -(1 << 40))  # any memory is over it
    path = tmp_path / "w.pkl"
    path.write_bytes(hostile.floods(10)["containers"])
    v = judge_file(path)
    assert v.verdict == "unverified"
    assert any("memory limit" in r for r in v.reasons), v.reasons


def test_a_deep_nest_is_walked_without_recursion(tmp_path: Path) -> None:
    """200,000 tuples each in the next: nothing the gate does recurses into values."""
    path = tmp_path / "deep.pkl"
    path.write_bytes(
        b"\x80\x04" + b"\x8c\x01a\x8c\x01b\x93" + b")" + b"\x85" * 200_000 + b"\x85R."
    )  # a call of a non-inert global with the nest as its argument
    v = judge_file(path)
    assert v.verdict == "unsafe", v.reasons


def test_the_cli_answers_a_compressed_memo_flood_with_unverified(tmp_path: Path) -> None:
    """The real limits, the real CLI: no exception, no exit 2, a verdict naming the limit."""
    path = tmp_path / "memo.pkl.gz"
    path.write_bytes(hostile.wrapped(hostile.floods(9_000_000)["memo"])["gzip"][1])
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_explorer", "scan", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "UNVERIFIED" in proc.stdout.upper() and "limit" in proc.stdout, proc.stdout[-2000:]


def test_the_compact_memo_keeps_the_unpicklers_rules() -> None:
    """Memo entries kept in a list where dense: a negative GET still fails as in C, entries put
    ahead of the dense run still count for MEMOIZE's numbering."""
    import pickle

    from ckpt_explorer.security.pickle_machine import walk_pickle

    negative = b"\x80\x02N\x94g-1\n."
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(negative)
    assert not walk_pickle(negative).complete
    # PUT 1 ahead of the dense run: MEMOIZE numbers by filled slots (1), so both MEMOIZEs
    # overwrite entry 1, and entry 0 never exists
    ahead = b"\x80\x04K\x07p1\n0N\x94\x8c\x01s\x94h\x01h\x01\x86."
    assert pickle.loads(ahead) == ("s", "s")
    walk = walk_pickle(ahead)
    assert walk.complete and walk.value.items == ("s", "s")
    gap = ahead.replace(b"h\x01h\x01", b"h\x01h\x00")
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(gap)
    assert not walk_pickle(gap).complete


def test_a_flood_stopped_by_a_limit_is_not_parsed_again_as_data(
    tmp_path: Path, small_limits: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A walk that stopped at a limit has already made the file unverified: the bytes are not
    also handed to the data parsers (which, given a 40 MB flood as a protobuf candidate, once
    took 30 s and 3 GiB)."""
    import ckpt_explorer.security.judge as judge_module

    placed: list[int] = []
    monkeypatch.setattr(judge_module, "place", lambda *a, **k: placed.append(1))
    cases = hostile.make(tmp_path, 150_000)
    for name in ("marks, gzip", "opcodes, gzip", "marks, raw"):
        v = judge_file(cases[name])
        assert v.verdict == "unverified", (name, v.reasons)
    assert placed == []


def test_a_protobuf_candidate_is_refused_at_its_first_field() -> None:
    """The sentencepiece check reads fields one at a time and stops at the first it refuses."""
    from ckpt_explorer.security import known_formats
    from ckpt_explorer.security.protobuf_wire import fields as walk

    flood = b"\x80\x04" + b"(" * 5_000_000
    fields = walk(flood, 0, len(flood))
    assert next(fields)[0] == 64  # the first field, without parsing the rest
    assert known_formats._sentencepiece(flood) == ""
