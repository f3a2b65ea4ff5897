"""Fuzzing the parsers that face hostile bytes: safetensors header, index JSON, allow-list unpickler.

A short run in CI; a longer one with ``CKPT_FUZZ_EXAMPLES=20000`` (see RELIABILITY.md).
The property: any input gives a result or the project's own error, never another exception,
never a hang, and never code execution.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import pickle
import struct
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save

from ckpt_explorer import CkptExplorerError
from ckpt_explorer.io.safetensors_header import parse_header
from ckpt_explorer.io.torch_file import read_torch_bytes
from ckpt_explorer.plain import to_plain
from ckpt_explorer.readers.hf.sharded_index import read_index_json
from ckpt_explorer.readers.tree import flatten

EXAMPLES = int(os.environ.get("CKPT_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=12),
)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=30,
)
_entry = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["F32", "BF16", "U8", "F4", "F6_E2M3", "X", "I64"]),
        "shape": st.lists(st.integers(-2, 9), max_size=3),
        "data_offsets": st.lists(st.integers(-4, 600), min_size=0, max_size=3),
    }
)
_header_doc = st.dictionaries(st.text(min_size=1, max_size=6), _entry, max_size=6)


def _real_header() -> tuple[bytes, int]:
    raw = save({"a": torch.ones(3, 4), "b": torch.zeros(5, dtype=torch.bfloat16)})
    (n,) = struct.unpack("<Q", raw[:8])
    return raw[8 : 8 + n], len(raw)


REAL_HEADER, REAL_SIZE = _real_header()


@FUZZ
@given(doc=_header_doc, metadata=_json, size=st.integers(0, 4096))
def test_structured_safetensors_headers(doc: dict, metadata: object, size: int) -> None:
    raw = json.dumps({"__metadata__": metadata, **doc}).encode()
    try:
        header = parse_header("fuzz.safetensors", raw, size)
    except CkptExplorerError:
        return
    assert header.data_end <= size
    ends = sorted((e.begin, e.end) for e in header.entries)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ends))


@FUZZ
@given(
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8),
    cut=st.integers(0, 10**6),
)
def test_mutated_real_safetensors_headers(flips: list[tuple[int, int]], cut: int) -> None:
    raw = bytearray(REAL_HEADER)
    for pos, value in flips:
        raw[pos % len(raw)] = value
    raw = raw[: max(1, cut % (len(raw) + 1))]
    with contextlib.suppress(CkptExplorerError):
        parse_header("fuzz.safetensors", bytes(raw), REAL_SIZE)


@FUZZ
@given(doc=_json)
def test_index_json(tmp_path: Path, doc: object) -> None:
    path = tmp_path / "model.safetensors.index.json"
    path.write_text(json.dumps(doc))
    try:
        parsed = read_index_json(path)
    except CkptExplorerError:
        return
    assert isinstance(parsed["weight_map"], dict)


def _real_pickle() -> bytes:
    buf = io.BytesIO()
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.ones(2))])
    opt.step()
    torch.save({"w": torch.ones(2, 2), "opt": opt.state_dict(), "n": 3}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zf:
        return zf.read(next(n for n in zf.namelist() if n.endswith("data.pkl")))


REAL_PICKLE = _real_pickle()


def _blob(data_pkl: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("archive/data.pkl", data_pkl)
    return out.getvalue()


@FUZZ
@given(
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=6),
    cut=st.integers(0, 10**6),
)
def test_mutated_pickles_never_escape(
    tmp_path: Path, flips: list[tuple[int, int]], cut: int
) -> None:
    marker = tmp_path / "PWNED"
    raw = bytearray(REAL_PICKLE)
    for pos, value in flips:
        raw[pos % len(raw)] = value
    raw = raw[: max(1, cut % (len(raw) + 1))]
    with contextlib.suppress(CkptExplorerError):
        read_torch_bytes(_blob(bytes(raw)), tmp_path / "fuzz.pt")
    assert not marker.exists()


@FUZZ
@given(payload=st.binary(max_size=300))
def test_random_pickle_bytes(tmp_path: Path, payload: bytes) -> None:
    with contextlib.suppress(CkptExplorerError):
        read_torch_bytes(_blob(b"\x80\x02" + payload), tmp_path / "fuzz.pt")


@pytest.mark.parametrize("length", [1 << 56, (1 << 64) - 1, 5])
def test_a_bytearray_longer_than_the_pickle_is_refused(tmp_path: Path, length: int) -> None:
    """BYTEARRAY8 claiming more bytes than the pickle holds (found by the fuzzer above: pickle.py
    allocates the claimed size first, a MemoryError) is a clear error, allocating nothing."""
    payload = b"\x96" + length.to_bytes(8, "little") + b"\x01"
    with pytest.raises(CkptExplorerError):
        read_torch_bytes(_blob(b"\x80\x02" + payload), tmp_path / "fuzz.pt")


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


# Pickle expressions, each pushing one value: scalars, containers, memo puts and gets (small
# indices, so that references hit and objects get shared), calls of allow-listed and refused
# globals, BUILD, NEWOBJ and persistent ids. Protocol 2 framing, as torch.save writes.
_GLOBALS = [
    _global(m, n)
    for m, n in [
        ("__builtin__", "list"), ("__builtin__", "set"), ("__builtin__", "frozenset"),
        ("__builtin__", "dict"), ("__builtin__", "tuple"), ("__builtin__", "str"),
        ("__builtin__", "bytearray"), ("__builtin__", "range"), ("torch", "Size"),
        ("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor_v2"),
        ("torch._utils", "_rebuild_parameter"), ("torch", "FloatStorage"),
        ("torch._tensor", "_rebuild_from_type_v2"), ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"), ("numpy", "ndarray"),
        ("copyreg", "_reconstructor"), ("os", "system"), ("argparse", "Namespace"),
        ("torch", "device"), ("torch.serialization", "_get_layout"),
    ]
]  # fmt: skip
_LEAVES = [
    b"N", b"K\x05", b"J\x00\x00\x01\x00", b"\x8a\x05" + (2**33).to_bytes(5, "little"),
    b"X\x01\x00\x00\x00a", b"X\x07\x00\x00\x00storage", b"X\x03\x00\x00\x00cpu",
    b"U\x02f8", b"C\x04\x00\x00\x00\x00", b"\x88", b")", b"N" + b"r" + struct.pack("<I", 2**30),
    *(b"h" + bytes([k]) for k in range(6)),
    *_GLOBALS,
]  # fmt: skip


def _pickle_forms(inner: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    many = st.lists(inner, max_size=4).map(b"".join)
    pairs = st.lists(st.tuples(inner, inner).map(b"".join), max_size=3).map(b"".join)
    glob = st.sampled_from(_GLOBALS)
    slot = st.integers(0, 5).map(lambda k: b"q" + bytes([k]))
    return st.one_of(
        many.map(lambda b: b"](" + b + b"e"),
        pairs.map(lambda b: b"}(" + b + b"u"),
        many.map(lambda b: b"(" + b + b"t"),
        many.map(lambda b: b"\x8f(" + b + b"\x90"),
        many.map(lambda b: b"(" + b + b"\x91"),
        st.tuples(inner, slot).map(b"".join),
        st.tuples(glob, many).map(lambda t: t[0] + b"(" + t[1] + b"tR"),
        st.tuples(glob, many).map(lambda t: t[0] + b"(" + t[1] + b"t\x81"),
        st.tuples(inner, inner).map(lambda t: t[0] + t[1] + b"b"),
        many.map(lambda b: b"(" + b + b"tQ"),
    )


_pickle_expr = st.recursive(st.sampled_from(_LEAVES), _pickle_forms, max_leaves=40)


@FUZZ
@given(program=_pickle_expr)
def test_pickle_programs_stay_bounded(tmp_path: Path, program: bytes) -> None:
    """Opcode programs with shared references: a result (which readers can then walk and
    render) or the project's error; never a hang, a memory blow-up or a foreign exception."""
    marker = tmp_path / "PWNED"
    command = f"touch {marker}".encode()
    payload = b"X" + struct.pack("<I", len(command)) + command + b"\x85"
    data = b"\x80\x02" + payload + b"0" + program + b"."
    try:
        obj = read_torch_bytes(_blob(data), tmp_path / "fuzz.pt")
    except CkptExplorerError:
        return
    finally:
        assert not marker.exists()
    list(flatten(obj))
    json.dumps(to_plain(obj))


@pytest.mark.parametrize(
    "module,name",
    [("os", "system"), ("builtins", "eval"), ("subprocess", "Popen"), ("posix", "system")],
)
def test_dangerous_globals_are_never_called(tmp_path: Path, module: str, name: str) -> None:
    marker = tmp_path / "PWNED"
    arg = f"touch {marker}" if name != "eval" else f"open({str(marker)!r}, 'w')"
    data = (
        b"\x80\x02c"
        + module.encode()
        + b"\n"
        + name.encode()
        + b"\n"
        + pickle.dumps((arg,), protocol=2)[2:-1]
        + b"R."
    )
    obj = read_torch_bytes(_blob(data), tmp_path / "evil.pt")
    assert type(obj).__qualified_name__ == f"{module}.{name}"
    assert not marker.exists()
