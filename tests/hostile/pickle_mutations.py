"""Generated gate inputs: a seed pickle (malicious or benign) rebuilt with mutated encodings.

A seed is a short program of abstract steps (push a string, an int, a global; build a tuple;
call). Each rendering chooses, step by step: the lead opcodes before the program (EMPTY_SET,
LONG4, BINUNICODE8, ... then POP), the encoding of every argument (any string opcode; INT text
in decimal, hex, octal, binary, with underscores or cut at a NUL; BININT*, LONG1, LONG text),
memo use (PUT / BINPUT / LONG_BINPUT / MEMOIZE with its len(memo) numbering, then GETs in
place of repeats), framing (none, frames at random cut points, possibly mid-opcode) and the
container: a plain file under a random suffix, a torch zip (stored, deflated, duplicate names,
two central directories, prefixed bytes), a legacy torch file (the program as any of its five
pickles), torch's legacy tar, a ``.npy`` object array, an ``.npz`` member.

``files()`` is the hypothesis strategy (deterministic under ``@seed``/``derandomize``);
``random_file(rng)`` draws the same distribution from a ``random.Random`` (the bench's 100k
files). The oracle, not this module, says what each file does.
"""

from __future__ import annotations

import io
import pickle
import random
import struct
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import attack_corpus as ac
from hypothesis import strategies as st

T = TypeVar("T")


class Chooser:
    """One interface over hypothesis' ``draw`` and ``random.Random``."""

    def __init__(self, draw: Any = None, rng: random.Random | None = None) -> None:
        self.draw, self.rng = draw, rng

    def pick(self, seq: Sequence[T]) -> T:
        if self.draw is not None:
            return self.draw(st.sampled_from(seq))  # type: ignore[no-any-return]
        assert self.rng is not None
        return self.rng.choice(seq)

    def int(self, lo: int, hi: int) -> int:
        if self.draw is not None:
            return int(self.draw(st.integers(lo, hi)))
        assert self.rng is not None
        return self.rng.randint(lo, hi)

    def coin(self, p: float = 0.5) -> bool:
        return self.int(0, 999) < int(p * 1000)


# ---------------------------------------------------------------------------- seeds
# steps: ("str", text) ("int", n) ("global", mod, name) ("tuple", n) ("reduce",) ("none",)
#        ("dict0",) ("setitem",) ("list", n)


def _malicious_seeds(tag: str) -> list[list[tuple[Any, ...]]]:
    c = ac.cmd(tag)
    py = ac.pycode(tag)
    return [
        [("global", "os", "system"), ("str", c), ("tuple", 1), ("reduce",)],
        [("global", "builtins", "exec"), ("str", py), ("tuple", 1), ("reduce",)],
        [("global", "subprocess", "call"), ("str", c), ("tuple", 1), ("reduce",)],
        [
            ("global", "builtins", "getattr"),
            ("global", "builtins", "__import__"),
            ("str", "os"),
            ("tuple", 1),
            ("reduce",),
            ("str", "system"),
            ("tuple", 2),
            ("reduce",),
            ("str", c),
            ("tuple", 1),
            ("reduce",),
        ],
        [("global", "builtins", "print.__self__.exec"), ("str", py), ("tuple", 1), ("reduce",)],
        [("global", "torch._utils", "os.system"), ("str", c), ("tuple", 1), ("reduce",)],
    ]


BENIGN_SEEDS: list[list[tuple[Any, ...]]] = [
    [("global", "collections", "OrderedDict"), ("tuple", 0), ("reduce",)],
    [
        ("dict0",),
        ("str", "lr"),
        ("int", 3),
        ("setitem",),
        ("str", "name"),
        ("str", "adam"),
        ("setitem",),
    ],
    [("str", "a"), ("int", 70000), ("int", -5), ("none",), ("list", 4)],
    [
        ("global", "builtins", "set"),
        ("int", 1),
        ("int", 2),
        ("list", 2),
        ("tuple", 1),
        ("reduce",),
    ],
]

LEADS: list[bytes] = [
    b"\x8f0",
    b"\x8b\x01\x00\x00\x00\x2a0",
    b"\x8d" + struct.pack("<Q", 2) + b"hi0",
    b"\x8e" + struct.pack("<Q", 2) + b"hi0",
    b"\x96" + struct.pack("<Q", 2) + b"hi0",
    b"(1",
    b"N0",
    b"I0x2a\n0",
    b"L0x2aL\n0",
    b"I0o52\n0",
    b"I0b101010\n0",
    b"I4_2\n0",
    b"I42\x00junk\n0",
    b"F1.5\x00x\n0",
    b"K\x070",
    b"\x88\x89\x880\x300",
]
SUFFIXES = ["", ".pkl", ".pt", ".pth", ".bin", ".ckpt", ".npy", ".th", ".p", ".joblib", ".pt.bak",
            ".data", ".safetensors.pkl"]  # fmt: skip


# ---------------------------------------------------------------------------- rendering


class _Render:
    def __init__(self, ch: Chooser, proto: int) -> None:
        self.ch, self.proto = ch, proto
        self.out = bytearray()
        self.memo: dict[Any, int] = {}  # value -> index holding it
        self.keys: set[int] = set()

    def string(self, text: str) -> bytes:
        if ("str", text) in self.memo and self.ch.coin(0.6):
            return self._get(self.memo[("str", text)])
        raw = text.encode()
        opts = ["short", "bin", "unicode"]
        if self.proto >= 4:
            opts.append("bin8")
        if "'" not in text and "\\" not in text and text.isascii():
            opts.append("string")
        kind = self.ch.pick(opts)
        if kind == "short" and len(raw) < 256:
            b = b"\x8c" + bytes([len(raw)]) + raw
        elif kind == "bin8":
            b = b"\x8d" + struct.pack("<Q", len(raw)) + raw
        elif kind == "unicode" and "\n" not in text and "\\" not in text:
            b = b"V" + raw + b"\n"
        elif kind == "string":
            b = ac.s0(text)
        else:
            b = b"X" + struct.pack("<I", len(raw)) + raw
        return b + self._maybe_put(("str", text))

    def integer(self, n: int) -> bytes:
        kinds = ["I", "L", "long1"]
        if 0 <= n < 256:
            kinds.append("K")
        if -(2**31) <= n < 2**31:
            kinds.append("J")
        kind = self.ch.pick(kinds)
        if kind == "K":
            return b"K" + bytes([n])
        if kind == "J":
            return b"J" + struct.pack("<i", n)
        if kind == "long1":
            enc = pickle.encode_long(n)
            return b"\x8a" + bytes([len(enc)]) + enc
        text = self.ch.pick(["dec", "hex", "oct", "bin", "under", "nul"])
        sign, m = ("-" if n < 0 else ""), abs(n)
        body = {
            "dec": str(m),
            "hex": hex(m),
            "oct": oct(m),
            "bin": bin(m),
            "under": "_".join(str(m)) if m >= 10 else str(m),
            "nul": f"{m}\x00zz",
        }[text]
        if kind == "L" and text != "nul":
            return b"L" + (sign + body).encode() + b"L\n"
        return b"I" + (sign + body).encode() + b"\n"

    def _maybe_put(self, key: Any) -> bytes:
        if not self.ch.coin(0.4):
            return b""
        kind = self.ch.pick(["MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"] if self.proto >= 4
                            else ["PUT", "BINPUT", "LONG_BINPUT"])  # fmt: skip
        if kind == "MEMOIZE":
            idx = len(self.keys)
            op = b"\x94"
        else:
            idx = self.ch.pick([0, 1, 2, 5, 255, 256, 70000])
            if kind == "BINPUT":
                idx %= 256
            if kind == "PUT":
                op = b"p%d\n" % idx
            elif kind == "BINPUT":
                op = b"q" + bytes([idx])
            else:
                op = b"r" + struct.pack("<I", idx)
        self.memo = {k: v for k, v in self.memo.items() if v != idx}  # a re-PUT overwrites
        self.memo[key] = idx
        self.keys.add(idx)
        return op

    def _get(self, idx: int) -> bytes:
        kind = self.ch.pick(
            ["GET", "BINGET", "LONG_BINGET"] if idx < 256 else ["GET", "LONG_BINGET"]
        )
        if kind == "GET":
            return b"g%d\n" % idx
        return b"h" + bytes([idx]) if kind == "BINGET" else b"j" + struct.pack("<I", idx)

    def glob(self, mod: str, name: str) -> bytes:
        if self.proto >= 4 and (self.ch.coin(0.6) or "." in name):
            return self.string(mod) + self.string(name) + b"\x93"
        return ac.glob(mod, name)

    def program(self, steps: list[tuple[Any, ...]]) -> bytes:
        out = bytearray()
        for step in steps:
            kind = step[0]
            if kind == "str":
                out += self.string(step[1])
            elif kind == "int":
                out += self.integer(step[1])
            elif kind == "global":
                out += self.glob(step[1], step[2])
            elif kind == "tuple":  # seeds use n <= 3: TUPLE1..3, EMPTY_TUPLE for 0
                out += {0: b")", 1: b"\x85", 2: b"\x86", 3: b"\x87"}[step[1]]
            elif kind == "reduce":
                out += b"R"
            elif kind == "none":
                out += b"N"
            elif kind == "dict0":
                out += b"}"
            elif kind == "setitem":
                out += b"s"
        return bytes(out)


def render(ch: Chooser, steps: list[tuple[Any, ...]]) -> bytes:
    """One pickle of ``steps``: header, lead opcodes, arguments, memo and frames chosen."""
    proto = ch.pick([-1, 0, 1, 2, 3, 4, 5])
    r = _Render(ch, max(proto, 0))
    body = bytearray()
    for _ in range(ch.int(0, 3)):
        body += ch.pick(LEADS)
    if steps and steps[-1][0] == "list":  # ("list", n): the n pushes wrapped by MARK .. LIST
        body += b"(" + r.program(steps[:-1]) + b"l"
    else:
        body += r.program(steps)
    body += b"."
    head = b"\x80" + bytes([proto]) if proto >= 0 else b""
    if proto >= 4 and ch.coin(0.5):
        cuts = sorted({ch.int(0, len(body)) for _ in range(ch.int(1, 3))})
        framed, last = bytearray(), 0
        for cut in [*cuts, len(body)]:
            if cut > last:
                framed += b"\x95" + struct.pack("<Q", cut - last) + body[last:cut]
                last = cut
        body = framed
    return head + bytes(body)


# ---------------------------------------------------------------------------- containers


@dataclass
class Generated:
    """A generated input: its bytes (or folder maker), name and how it was built."""

    name: str
    data: bytes
    malicious_seed: bool
    how: str

    def write(self, folder: Path) -> Path:
        p = folder / self.name
        p.write_bytes(self.data)
        return p


def _legacy(ch: Chooser, pkl: bytes) -> tuple[bytes, str]:
    parts = ac._legacy_parts()
    at = ch.int(0, 4)
    parts[at] = pkl
    return b"".join(parts), f"legacy pickle #{at}"


def _tar(ch: Chooser, pkl: bytes) -> tuple[bytes, str]:
    members = {
        "storages": pickle.dumps(0, 2) + pickle.dumps([], 2),
        "tensors": pickle.dumps(0, 2),
        "pickle": pickle.dumps({"a": 1}, 2),
    }
    which = ch.pick(list(members))
    members[which] = pkl + (pickle.dumps([], 2) if which == "storages" else b"")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for n, data in members.items():
            info = tarfile.TarInfo(n)
            info.size, info.mtime = len(data), 0
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue(), f"tar member {which}"


def _npy(ch: Chooser, pkl: bytes) -> tuple[bytes, str]:
    header = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    major = ch.pick([1, 2])
    size = struct.pack("<H", len(header)) if major == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([major, 0]) + size + header.encode() + pkl, f"npy v{major}"


def _torch_zip(ch: Chooser, pkl: bytes) -> tuple[bytes, str]:
    members = ac.torch_members()
    name = next(n for n, _ in members if n.endswith("/data.pkl"))
    trick = ch.pick(["stored", "deflated", "dup", "dupcase", "two_cdirs", "prefix", "npz"])
    z = ac.Zip()
    if trick in ("stored", "deflated"):
        method = 8 if trick == "deflated" else 0
        entries = [z.add(n, pkl if n == name else d, method=method) for n, d in members]
        return z.finish(entries), f"torch zip ({trick})"
    if trick in ("dup", "dupcase"):
        twin = name if trick == "dup" else name[: -len("data.pkl")] + "DATA.PKL"
        entries = []
        for n, d in members:
            entries.append(z.add(n, d))
            if n == name:
                entries.append(z.add(twin, pkl))
        return z.finish(entries), f"torch zip ({trick})"
    if trick == "npz":
        npy, _ = _npy(ch, pkl)
        entries = [z.add("a.npy", npy), z.add("b", b"x")]
        return z.finish(entries), "npz member"
    if trick == "two_cdirs":
        ms = [z.add(n, pkl if n == name else d) for n, d in members]
        z.add("spacer", bytes(4096))  # in no directory: Python's records lie past its shift
        ps = [z.add(n, d) for n, d in members]
        at = len(z.buf)
        cd_m = ac.Zip.central(ms)
        cd_p = ac.Zip.central(ps, shift=len(cd_m), size=len(cd_m))
        return bytes(z.buf) + cd_m + cd_p + ac.Zip.eocd(len(ms), len(cd_m), at), "two cdirs"
    junk = ch.pick([b"\x00" * 16, b"PK\x03\x04junk", b"\x80\x02N."])
    zz = ac.Zip(junk)
    entries = [zz.add(n, pkl if n == name else d) for n, d in members]
    return zz.finish(entries), "zip with prepended bytes"


_CONTAINERS: dict[str, Callable[[Chooser, bytes], tuple[bytes, str]]] = {
    "legacy": _legacy,
    "tar": _tar,
    "npy": _npy,
    "zip": _torch_zip,
}


def generate(ch: Chooser, index: int) -> Generated:
    """One generated input, numbered ``index`` (the marker's name is the file's name)."""
    container = ch.pick(["plain", "plain", "plain", "legacy", "tar", "npy", "zip", "zip"])
    suffix = {
        "plain": ch.pick(SUFFIXES),
        "legacy": ".pt",
        "tar": ".pt",
        "npy": ".npy",
        "zip": ch.pick([".pt", ".bin", ".pth", ".npz"]),
    }[container]
    name = f"gen{index:06d}{suffix}"
    bad = ch.coin(0.5)
    seeds = _malicious_seeds(name) if bad else BENIGN_SEEDS
    steps = seeds[ch.int(0, len(seeds) - 1)]
    pkl = render(ch, steps)
    how = "plain"
    if container != "plain":
        pkl, how = _CONTAINERS[container](ch, pkl)
    return Generated(name, pkl, bad, how)


@st.composite
def files(draw: Any, index: int = 0) -> Generated:
    """The hypothesis strategy: one generated input."""
    return generate(Chooser(draw=draw), index)


def random_file(rng: random.Random, index: int) -> Generated:
    """The same distribution, drawn from ``rng`` (fast, for long runs)."""
    return generate(Chooser(rng=rng), index)
