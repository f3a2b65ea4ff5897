"""Pickle bombs: tiny pickles that would cost gigabytes or hours are refused quickly and cheaply.

The cases come from the hostile corpus (``_pickle_bombs`` in tests/hostile/make_corpus.py). Each
runs the real CLI in a child process under a 1 GiB data limit and a wall-clock limit, and the
child's peak memory is read back from the kernel.
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from test_hostile_inputs import _with_data_pkl

from ckpt_explorer import UnsafeCheckpointError, open_checkpoint
from ckpt_explorer.io import safe_pickle

DATA_LIMIT = 1 << 30
WALL_LIMIT_S = 120


def _limit_data() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (DATA_LIMIT, DATA_LIMIT))


def _run_limited(path: Path) -> tuple[int, str, str, int, float]:
    """Run ``ckpt-explorer inspect --json`` under the limits: (code, out, err, peak KiB, s)."""
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ckpt_explorer", "inspect", str(path), "--json"],
            stdout=out,
            stderr=err,
            text=True,
            preexec_fn=_limit_data,
        )
        timer = threading.Timer(WALL_LIMIT_S, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the session's
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if time.monotonic() - start >= WALL_LIMIT_S:
            pytest.fail(f"{path.name}: still running after {WALL_LIMIT_S} s")
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), usage.ru_maxrss, time.monotonic() - start


def _bombs(corpus: tuple[Path, dict[str, Any]]) -> dict[str, Path]:
    root, cases = corpus
    found = {n: root / c["path"] for n, c in cases.items() if n.startswith("torch pickle bomb")}
    assert len(found) >= 10
    return found


def test_memo_bomb_opens_in_little_memory(corpus: tuple[Path, dict[str, Any]]) -> None:
    """A LONG_BINPUT index of 2**28 made CPython 3.11's C unpickler touch a 4 GB memo table."""
    path = next(p for n, p in _bombs(corpus).items() if "memo index" in n)
    code, out, err, peak_kib, _ = _run_limited(path)
    assert code == 0, err
    assert json.loads(out)["tensor_count"] == 0
    assert peak_kib < DATA_LIMIT // 1024


def test_every_bomb_is_refused_under_the_limits(corpus: tuple[Path, dict[str, Any]]) -> None:
    problems = []
    for name, path in _bombs(corpus).items():
        if "memo index" in name:
            continue
        code, out, err, _, seconds = _run_limited(path)
        line = err.strip()
        if code != 2 or "\n" in line or "not allowed" not in line or str(path) not in line:
            problems.append(f"{name}: exit {code} after {seconds:.1f} s, stderr {err[-300:]!r}")
        if out:
            problems.append(f"{name}: printed {out[:100]!r}")
    assert not problems, "\n".join(problems)


def test_bombs_raise_the_projects_error_in_process(corpus: tuple[Path, dict[str, Any]]) -> None:
    for name, path in _bombs(corpus).items():
        if "memo index" in name:
            assert len(open_checkpoint(path).tensors) == 0
            continue
        with pytest.raises(UnsafeCheckpointError, match="not allowed"):
            open_checkpoint(path)


def test_a_layout_named_by_a_shared_structure_is_refused(tmp_path: Path) -> None:
    """``torch.serialization._get_layout`` would ``str()`` its argument: 2**40 elements here."""
    shared: list[Any] = []
    for _ in range(40):
        shared = [shared, shared]
    body = pickle.dumps(shared, protocol=2)[2:-1]
    payload = b"\x80\x02ctorch.serialization\n_get_layout\n" + body + b"\x85R."
    path = _with_data_pkl(tmp_path, "layout.pt", payload)
    code, _, err, _, _ = _run_limited(path)
    assert code == 2 and "not allowed" in err, err


def _shared_tuple_ops(depth: int = 60) -> bytes:
    """Opcodes memoising t[i+1] = (t[i], t[i]) at index i+1: hashing t[depth] is 2**depth steps."""
    ops = b")r" + struct.pack("<I", 0) + b"0"
    for i in range(depth):
        get = b"j" + struct.pack("<I", i)
        ops += get + get + b"\x86r" + struct.pack("<I", i + 1) + b"0"
    return ops


@pytest.mark.parametrize(
    "ctor,element",
    [
        ("set", "pair"),  # set([(1, t)]) hashes the whole tuple
        ("frozenset", "pair"),
        ("dict", "pair"),  # dict([(t, 1)]) hashes t
        ("dict", "list"),  # dict([[t, 1]]) hashes t too
    ],
)
def test_hashing_constructors_are_charged_for_every_element(
    tmp_path: Path, ctor: str, element: str
) -> None:
    deep = b"j" + struct.pack("<I", 60)
    one = b"K\x01"
    item = one + deep + b"\x86" if element == "pair" else b"(" + deep + one + b"l"
    if ctor == "dict" and element == "pair":
        item = deep + one + b"\x86"
    payload = (
        b"\x80\x02" + _shared_tuple_ops() + b"c__builtin__\n" + ctor.encode() + b"\n]("
        + item + b"e\x85R."
    )  # fmt: skip
    path = _with_data_pkl(tmp_path, "hash.pt", payload)
    # in a child: a hash in C cannot be interrupted, so a regression must not hang the session
    code, _, err, _, _ = _run_limited(path)
    assert code == 2 and "not allowed" in err, err


def _reader_functions_state() -> dict[str, Any]:
    state = {}
    for name, value in vars(safe_pickle).items():
        if callable(value) and hasattr(value, "__defaults__"):
            state[name] = (value.__defaults__, value.__kwdefaults__, dict(value.__dict__))
    return state


def test_a_file_cannot_change_the_readers_functions(corpus: tuple[Path, dict[str, Any]]) -> None:
    """BUILD on an allow-listed function would set its attributes for every later file."""
    before = _reader_functions_state()
    path = next(p for n, p in _bombs(corpus).items() if "__defaults__" in n)
    with pytest.raises(UnsafeCheckpointError):
        open_checkpoint(path)
    assert _reader_functions_state() == before


def test_plain_python_and_numpy_values_read_exactly(tmp_path: Path) -> None:
    """The limits leave what real checkpoints pickle intact: RNG states, numpy values, builtins."""
    import random

    import numpy as np

    saved = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "scalar": np.float64(3.5),
        "array": np.arange(6, dtype=np.int16).reshape(2, 3),
        "set": {1, 2},
        "frozen": frozenset({"a"}),
        "raw": b"xy",
        "buffer": bytearray(b"z"),
        "span": slice(1, 2),
        "complex": complex(1, 2),
        "range": range(3),
        "shared": [(1, 2)] * 3,
    }
    path = tmp_path / "rng_state.pth"
    torch.save({**saved, "cpu": torch.get_rng_state()}, path)
    view = open_checkpoint(path)
    assert [t.name for t in view.tensors] == ["cpu"]
    values = dict(view.values)
    for key in ("python", "set", "frozen", "raw", "buffer", "span", "complex", "range", "shared"):
        assert values[key] == saved[key], key
    assert values["numpy"][0] == "MT19937"
    assert np.array_equal(values["numpy"][1], saved["numpy"][1])
    assert values["numpy"][2:] == saved["numpy"][2:]
    assert values["scalar"] == 3.5 and values["scalar"].dtype == np.float64
    assert np.array_equal(values["array"], saved["array"])
    assert values["array"].dtype == np.int16
