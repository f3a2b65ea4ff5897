"""The pickle walk against CPython's own unpicklers, one construct at a time.

Each case is hand-assembled bytes of a pickle that ``pickletools`` (and scanners built on it)
reads differently from CPython, with a payload that only makes a marker folder. The real
unpicklers are the oracle: a child process loads the bytes with the C unpickler
(``pickle.load``, also with torch's ``encoding="utf-8"``) and the pure-Python one
(``pickle._Unpickler``, as joblib uses); a case whose
payload runs under either must never be called safe, and the walk must name the payload.
Benign twins (the same tricks without a payload) must stay safe.
"""

from __future__ import annotations

import pickle
import pickletools
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_explorer.security import judge_file
from ckpt_explorer.security.pickle_machine import walk_pickle
from ckpt_explorer.security.pickle_text import read_int

_CHILD = r"""
import pickle, sys
path, kind = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    try:
        if kind == "py":
            pickle._Unpickler(f).load()
        else:  # torch.load passes encoding="utf-8" to its unpickler
            pickle.load(f, encoding="utf-8" if kind == "c-utf8" else "ASCII")
    except Exception as e:
        print(type(e).__name__, e)
"""


def _payload(marker: Path) -> bytes:
    """Protocol 0: posix.mkdir(marker), the value left on the stack."""
    return b"cposix\nmkdir\n(V" + str(marker).encode() + b"\ntR"


def _runs(path: Path, marker: Path) -> set[str]:
    """Which real unpicklers make the marker (each in a fresh child, marker removed between)."""
    out = set()
    for kind in ("c", "c-utf8", "py"):
        if marker.exists():
            marker.rmdir()
        subprocess.run(
            [sys.executable, "-c", _CHILD, str(path), kind],
            timeout=60,
            capture_output=True,
            check=False,
        )
        if marker.exists():
            out.add(kind)
            marker.rmdir()
    return out


def _cases(marker: Path) -> dict[str, bytes]:
    p = _payload(marker)
    return {
        # integer texts that pickletools refuses and CPython reads (the walk stopped there)
        "int_hex": b"I0x2a\n0" + p + b".",
        "int_octal_prefix": b"I0o52\n0" + p + b".",
        "int_binary": b"I0b101010\n0" + p + b".",
        "int_underscore": b"I4_2\n0" + p + b".",
        "long_hex": b"L0x2aL\n0" + p + b".",
        # C reads these, Python refuses them: the payload runs under pickle.load
        "int_c_octal": b"I052\n0" + p + b".",
        "int_nul": b"I1\x00junk\n0" + p + b".",
        # a Python 2 string that is not ASCII (torch.load decodes UTF-8, pickle.load refuses)
        "string_utf8": "S'\u00e9'\n0".encode() + p + b".",
        # a lead opcode other than PROTO, then POP
        "lead_empty_set": b"\x8f0" + p + b".",
        "lead_long4": b"\x8b\x01\x00\x00\x00\x050" + p + b".",
        "lead_binbytes8": b"\x8e\x02\x00\x00\x00\x00\x00\x00\x00ab0" + p + b".",
        # memo numbering: MEMOIZE counts filled slots, so after PUT 7 it fills slot 1
        "memo_count": b"\x80\x04\x8c\x05posixp7\n0\x8c\x05mkdir\x94g7\nh\x01\x93(V"
        + str(marker).encode()
        + b"\ntR.",
        # a name built on the stack from memoised strings
        "stack_global": b"\x80\x04\x8c\x05posixq\x00\x8c\x05mkdirq\x01h\x00h\x01\x93(V"
        + str(marker).encode()
        + b"\ntR.",
        # INST with no MARK: the Python unpickler imports before it looks for the mark
        "inst_order": b"\x80\x02(V" + str(marker).encode() + b"\niposix\nmkdir\n.",
        # framing the two unpicklers read differently
        "frame_straddle": b"\x80\x04\x95\x03\x00\x00\x00\x00\x00\x00\x00" + p + b".",
        "frame_past_end": b"\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00" + p + b".",
        # the payload behind a first pickle (a legacy torch file reads on)
        "second_pickle": pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + p + b".",
    }


@pytest.fixture(scope="module")
def marker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("walker") / "MARK"


@pytest.mark.parametrize("name", sorted(_cases(Path("/x"))))
def test_payload_never_safe(name: str, marker: Path, tmp_path: Path) -> None:
    data = _cases(marker)[name]
    path = tmp_path / f"{name}.bin"
    path.write_bytes(data)
    verdict = judge_file(path)
    assert verdict.verdict in ("unsafe", "unverified"), (name, verdict.findings)
    if name != "second_pickle":  # only torch.load reads past the first pickle
        ran = _runs(path, marker)
        assert ran, f"{name}: the case is wrong, no real unpickler runs its payload"
        named = " ".join(f.message for f in verdict.findings)
        assert "posix.mkdir" in named or "cannot know" in named or "differently" in named, named


def test_pickletools_refuses_what_the_walk_reads(marker: Path) -> None:
    """The divergences are real: pickletools stops where CPython reads on."""
    for name in ("int_hex", "int_octal_prefix", "int_binary", "long_hex"):
        data = _cases(marker)[name]
        with pytest.raises(ValueError):
            list(pickletools.genops(data))
        walk = walk_pickle(data)
        assert walk.complete and [g.qualified for g in walk.globals] == ["posix.mkdir"], name
        assert not walk.doubts, (name, walk.doubts)  # both unpicklers agree on these


def test_divergent_arguments_are_doubts(marker: Path) -> None:
    for name in ("int_c_octal", "int_nul"):
        walk = walk_pickle(_cases(marker)[name])
        assert walk.doubts and "differently" in walk.doubts[0][1], name
        assert [g.qualified for g in walk.globals] == ["posix.mkdir"], name  # C's reading


@pytest.mark.parametrize(
    "line, value, agree",
    [
        (b"42\n", 42, True), (b"0x2a\n", 42, True), (b"052\n", 42, False),
        (b"01\n", True, True), (b" 1\n", True, True), (b"1_0\n", 10, True),
        (b"1\x00zz\n", 1, False),
        (b"-7\n", -7, True), (b"99999999999999999999\n", 99999999999999999999, True),
    ],
)  # fmt: skip
def test_int_text_as_c_reads_it(line: bytes, value: object, agree: bool) -> None:
    parsed = read_int(line)
    assert parsed.value == value and type(parsed.value) is type(value)
    assert parsed.agree == agree
    assert pickle.loads(b"I" + line + b".") == value  # the C unpickler itself


def test_memo_count_is_cs() -> None:
    """After ``PUT 7``, ``MEMOIZE`` fills slot 1 (the count of filled slots), not slot 8."""
    data = b"\x80\x04\x8c\x01ap7\n0\x8c\x01b\x94h\x01."
    assert pickle.loads(data) == "b"
    assert walk_pickle(data).value == "b"


def test_benign_twins_stay_safe(tmp_path: Path) -> None:
    cases = {
        "int_hex": b"I0x2a\n.",
        "memo": b"\x80\x04\x8c\x01ap7\n0\x8c\x01b\x94h\x01.",
        "inert_global": b"\x80\x02c__builtin__\nset\n)R.",
        "frames": pickle.dumps({"a": list(range(1000)), "b": "x" * 70_000}, protocol=5),
    }
    for name, data in cases.items():
        path = tmp_path / f"{name}.pkl"
        path.write_bytes(data)
        pickle.loads(data)
        verdict = judge_file(path)
        assert verdict.verdict == "safe", (name, verdict.findings)


def test_walk_ends_where_the_c_unpickler_stops() -> None:
    """Two pickles back to back: the first walk ends right after its STOP, the second starts
    there (what torch's legacy reader relies on)."""
    import io

    data = pickle.dumps([1, 2], protocol=4) + pickle.dumps({"x": 3}, protocol=2)
    f = io.BytesIO(data)
    pickle.load(f)
    first = walk_pickle(data)
    assert first.complete and first.end == f.tell()
    second = walk_pickle(data, first.end)
    assert second.complete and second.end == len(data)
