"""Nested loaders judged by effect: every way a pickle reaches a global that loads bytes.

Each attack is written opcode by opcode; the oracle (tests/security_oracle.py) proves that the
real ``pickle.load`` runs its payload (a ``PWNED-*`` marker), and the gate must fail it: the
loaded bytes are found and judged (``unsafe``), or the file is ``unverified`` naming the loader.
Real outputs of torch and numpy that use these functions stay as they were.
"""

from __future__ import annotations

import io
import pickle
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "hostile"))

from attack_corpus import glob, payload
from security_oracle import Oracle

from ckpt_explorer.security import judge_file

LOADER = glob("torch.storage", "_load_from_bytes")


def _b(data: bytes) -> bytes:
    """SHORT_BINBYTES / BINBYTES of ``data``."""
    if len(data) < 256:
        return b"C" + bytes([len(data)]) + data
    return b"B" + struct.pack("<I", len(data)) + data


def _ints(data: bytes) -> bytes:
    """A list of the byte values of ``data`` (EMPTY_LIST, MARK, BININT1..., APPENDS)."""
    return b"](" + b"".join(b"K" + bytes([x]) for x in data) + b"e"


def _legacy(value: object) -> bytes:
    buf = io.BytesIO()
    torch.save(value, buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()


def _attacks(case: str) -> dict[str, bytes]:
    """name -> a whole pickle whose load runs ``payload(case)`` through a byte loader."""
    # protocol 0: no PROTO header, so the bytes do not even look like a pickle
    evil = payload(case, proto=0)
    padded = evil + b"\0" * 300  # the loader stops at the first STOP: the tail is ignored
    v2 = glob("torch._tensor", "_rebuild_from_type_v2")
    param = glob("torch.nn.parameter", "Parameter")
    bodies = {
        "inst": b"(" + _b(evil) + b"itorch.storage\n_load_from_bytes\n",
        "obj": b"(" + LOADER + _b(evil) + b"o",
        "rebuild_from_type_v2": v2 + b"(" + LOADER + param + _b(evil) + b"\x85}tR",
        "generator_ctor": glob("numpy.random._pickle", "__generator_ctor")
        + _b(evil)
        + LOADER
        + b"\x86R",
        "randomstate_ctor": glob("numpy.random._pickle", "__randomstate_ctor")
        + _b(evil)
        + LOADER
        + b"\x86R",
        "bytes_of_ints": LOADER + glob("builtins", "bytes") + _ints(evil) + b"\x85R\x85R",
        "bytearray_of_many_ints": LOADER
        + glob("builtins", "bytearray")
        + _ints(padded)
        + b"\x85R\x85R",
        "latin1_via_inst": b"("
        + glob("_codecs", "encode")
        + b"X"
        + struct.pack("<I", len(evil.decode("latin-1").encode()))
        + evil.decode("latin-1").encode()
        + b"\x8c\x06latin1\x86R"
        + b"itorch.storage\n_load_from_bytes\n",
        "ninth_of_nine": b"](" + b"".join(
            b"(" + _b(x) + b"itorch.storage\n_load_from_bytes\n"
            for x in [_legacy(i) for i in range(8)] + [evil]
        ) + b"e",
    }  # fmt: skip
    return {name: b"\x80\x03" + body + b"." for name, body in bodies.items()}


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    with Oracle(workers=1, timeout=120) as o:
        yield o


@pytest.fixture(scope="module")
def attacks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("nested")
    out = {}
    for name, data in _attacks("nested").items():
        out[name] = root / f"{name}.pkl"
        out[name].write_bytes(data)
    return out


def test_every_attack_runs_its_payload_under_pickle_load(
    attacks: dict[str, Path], oracle: Oracle
) -> None:
    results = oracle.run(list(attacks.values()), loaders=("pickle",))
    silent = [name for name, p in attacks.items() if not results[p].ran_marker]
    assert not silent, silent


@pytest.mark.parametrize(
    "name,verdict",
    [
        ("inst", "unsafe"),
        ("obj", "unsafe"),
        ("rebuild_from_type_v2", "unsafe"),
        ("generator_ctor", "unsafe"),
        ("randomstate_ctor", "unsafe"),
        ("bytes_of_ints", "unsafe"),
        ("bytearray_of_many_ints", "unverified"),
        ("latin1_via_inst", "unsafe"),
        ("ninth_of_nine", "unsafe"),
    ],
)
def test_the_gate_judges_what_the_loader_loads(
    attacks: dict[str, Path], name: str, verdict: str
) -> None:
    v = judge_file(attacks[name])
    assert v.verdict == verdict, v.findings
    text = " ".join(v.reasons)
    assert "torch.storage._load_from_bytes" in text
    if verdict == "unsafe":
        assert "os.system" in text  # found inside the loaded bytes


def test_a_loader_passed_stored_or_kept_is_unverified(tmp_path: Path) -> None:
    """Not called on bytes the walk knows: whatever later calls it is not judged."""
    benign = _b(_legacy(1))
    cases = {
        "stored": LOADER + b"\x85",  # a tuple holding the function
        "kept": LOADER + b"q\x00" + benign + b"\x85R0h\x00",  # called once, then returned
        "unknown_bytes": LOADER + glob("collections", "OrderedDict") + b")R\x85R",
        "build_state": glob("argparse", "Namespace") + b")R}\x8c\x01f" + LOADER + b"sb",
    }
    for name, body in cases.items():
        path = tmp_path / f"{name}.pkl"
        path.write_bytes(b"\x80\x03" + body + b".")
        v = judge_file(path)
        assert v.verdict == "unverified", (name, v.findings)
        assert "torch.storage._load_from_bytes" in " ".join(v.reasons), name


def test_newobj_of_a_loader_has_its_bytes_judged(tmp_path: Path) -> None:
    """The C unpickler refuses NEWOBJ of a function; the walk judges the bytes all the same."""
    path = tmp_path / "newobj.pkl"
    path.write_bytes(b"\x80\x03" + LOADER + _b(payload("newobj", proto=0)) + b"\x85\x81.")
    assert judge_file(path).verdict == "unsafe"


def test_an_argument_called_by_an_allow_listed_function_is_judged_as_called(
    tmp_path: Path,
) -> None:
    """``_rebuild_from_type_v2(func, ...)`` runs ``func(*args)``: a non-inert func is a call."""
    body = (
        glob("torch._tensor", "_rebuild_from_type_v2")
        + b"("
        + glob("somepkg.mod", "helper")
        + glob("torch.nn.parameter", "Parameter")
        + b")}tR"
    )
    path = tmp_path / "helper.pkl"
    path.write_bytes(b"\x80\x02" + body + b".")
    v = judge_file(path)
    assert v.verdict == "unsafe", v.findings
    assert "by torch._tensor._rebuild_from_type_v2" in " ".join(v.reasons)


class _Sub(torch.Tensor):
    pass


def test_real_outputs_that_use_these_functions_stay_as_they_were(tmp_path: Path) -> None:
    tensors = {"p": torch.nn.Parameter(torch.ones(3)), "t": torch.arange(4.0)}
    files = {
        "tensors.pkl": pickle.dumps(tensors),
        "tensors2.pkl": pickle.dumps(tensors, protocol=2),
        "rs.pkl": pickle.dumps(np.random.RandomState(3)),
        "rs2.pkl": pickle.dumps(np.random.RandomState(3), protocol=2),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        pickle.loads(data)
    import joblib

    joblib.dump(
        {"t": tensors, "a": np.arange(3), "o": np.array([torch.ones(1), 1], dtype=object)},
        tmp_path / "mixed.joblib",
    )
    joblib.load(tmp_path / "mixed.joblib")
    torch.save(tensors, tmp_path / "params.pt")
    torch.save(tensors, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    for path in sorted(tmp_path.iterdir()):
        v = judge_file(path)
        assert v.verdict == "safe", (path.name, v.findings)
    # a tensor subclass names its own class (not inert): judged by that name alone, as before
    sub = tmp_path / "sub.pkl"
    sub.write_bytes(pickle.dumps(torch.ones(2).as_subclass(_Sub)))
    v = judge_file(sub)
    assert v.verdict == "unverified", v.findings
    assert all("_Sub" in r for r in v.reasons), v.reasons
