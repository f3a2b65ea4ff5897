"""The smaller views: torch's legacy tar format, ``.npy`` object arrays, compressed streams,
and the pickled values of ColossalAI's flattened optimizer safetensors.

Each is read with the consumer's own parser where that parser is safe to run on hostile bytes
(``tarfile`` is what torch uses for its tar format; numpy's header reader evaluates only a
literal), and with a bounded decompressor for the compressed streams joblib and pandas read.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import struct
import tarfile
import zlib
from typing import Any

from ..io.safetensors_seen import checked_header, plain_metadata
from .judged import MAX_INFLATED, Judged, Stream
from .pickle_machine import Glob, Tup
from .zip_check import BufferFile

# element sizes of the storage classes torch's legacy formats name
_STORAGE_SIZES = {
    "DoubleStorage": 8, "FloatStorage": 4, "HalfStorage": 2, "BFloat16Storage": 2,
    "LongStorage": 8, "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1, "ByteStorage": 1,
    "BoolStorage": 1, "ComplexDoubleStorage": 16, "ComplexFloatStorage": 8,
    "QInt8Storage": 1, "QUInt8Storage": 1, "QInt32Storage": 4, "UntypedStorage": 1,
}  # fmt: skip
_MAX_MEMBER = 64 * 2**20  # a tar member read for judging
_MAX_HEADER = 1 << 20  # an .npy header (numpy reads any size when allow_pickle is set)
_MAX_SAFETENSORS_HEADER = 100 * 2**20


# --- torch's legacy tar format ---------------------------------------------------------------


def is_tar(buf: Any, start: int, end: int) -> bool:
    """Whether the first 512 bytes are a tar header with a valid checksum (``tarfile``'s test)."""
    if end - start < 512:
        return False
    block = bytes(buf[start : start + 512])
    field = block[148:156]
    try:
        stored = int(field.replace(b"\0", b" ").strip() or b"x", 8)
    except ValueError:
        return False
    unsigned = sum(block[:148]) + 256 + sum(block[156:])
    signed = sum(struct.unpack("148b", block[:148])) + 256 + sum(struct.unpack("356b", block[156:]))
    return stored in (unsigned, signed)


def judge_tar(buf: Any, start: int, end: int, where: str, scope: Any) -> Any:
    """The pickles ``torch.load`` reads from its legacy tar format (members ``storages``,
    ``tensors``, ``pickle``), found the way ``_legacy_load.legacy_load`` reads them."""
    out = Judged()
    try:
        tar = tarfile.open(  # noqa: SIM115 (closed by the with below)
            fileobj=io.BufferedReader(BufferFile(buf, start, end)), mode="r:"
        )
    except (tarfile.TarError, OSError, ValueError, EOFError):
        return out  # torch falls back to the pickle view (judged by the caller)
    out.formats.append("tar archive")
    with tar:
        for name, reader in (("storages", _storages), ("tensors", _tensors), ("pickle", None)):
            try:
                member = tar.getmember(name)
            except KeyError:
                continue
            label = f"{where} (tar member {name})"
            if member.size > _MAX_MEMBER:
                out.doubts.append(f"{label}: {member.size} bytes, over the limit to judge")
                continue
            f = tar.extractfile(member)
            if f is None:
                continue
            data = f.read()
            if reader is None:
                walk = scope.walk(data)
                if walk.did_anything:
                    out.streams.append(Stream(label, walk, data))
            else:
                reader(data, label, out, scope)
    return out


def _chain(data: bytes, at: int, label: str, out: Any, scope: Any) -> Any:
    walk = scope.walk(data, at)
    if walk.did_anything:
        out.streams.append(Stream(f"{label}, pickle at byte {at}", walk, data))
    return walk if walk.complete else None


def _count(walk: Any, label: str, out: Any) -> int | None:
    if isinstance(walk.value, int) and 0 <= walk.value < 10_000_000:
        return int(walk.value)
    out.doubts.append(
        f"{label}: a count the walk cannot read, so the pickles after it are not found"
    )
    return None


def _storages(data: bytes, label: str, out: Any, scope: Any) -> None:
    walk = _chain(data, 0, label, out, scope)
    n = _count(walk, label, out) if walk else None
    at = walk.end if walk else 0
    for _ in range(n or 0):
        args = _chain(data, at, label, out, scope)
        if args is None:
            return
        size = _element_size(args.value)
        if size is None or args.end + 8 > len(data):
            out.doubts.append(f"{label}: a storage record the walk cannot size")
            return
        (numel,) = struct.unpack("<q", data[args.end : args.end + 8])
        at = args.end + 8 + max(numel, 0) * size
    if n is not None:
        _chain(data, at, label, out, scope)  # the storage views


def _tensors(data: bytes, label: str, out: Any, scope: Any) -> None:
    walk = _chain(data, 0, label, out, scope)
    n = _count(walk, label, out) if walk else None
    at = walk.end if walk else 0
    for _ in range(n or 0):
        args = _chain(data, at, label, out, scope)
        if args is None or args.end + 8 > len(data):
            return
        (ndim,) = struct.unpack("<i", data[args.end : args.end + 4])
        at = args.end + 8 + 16 * max(ndim, 0) + 8


def _element_size(value: Any) -> int | None:
    items = value.items if isinstance(value, Tup) else None
    if not items or len(items) != 3 or not isinstance(items[2], Glob):
        return None
    return _STORAGE_SIZES.get(items[2].ref.name)


# --- numpy ----------------------------------------------------------------------------------


def judge_npy(buf: Any, start: int, end: int, where: str, scope: Any) -> Any:
    """An ``.npy``'s object array: ``numpy.load(allow_pickle=True)`` unpickles what follows the
    header (read here by numpy's own header reader, which evaluates only a literal)."""
    out = Judged()
    try:
        from numpy.lib import format as npformat

        impl = getattr(npformat, "_read_array_header", None)
        if impl is None:  # numpy 2 keeps it in its private module
            import importlib

            impl = importlib.import_module("numpy.lib._format_impl")._read_array_header
        f = io.BufferedReader(BufferFile(buf, start, end))
        version = npformat.read_magic(f)
        _shape, _fortran, dtype = impl(f, version, max_header_size=_MAX_HEADER)
    except Exception:  # numpy's own reader refuses it: numpy.load fails, nothing unpickled
        return out
    out.formats.append("npy")
    if dtype.hasobject:
        at = start + f.tell()
        walk = scope.walk(buf, at, end)
        out.streams.append(
            Stream(f"{where}, its object array (numpy.load allow_pickle)", walk, buf)
        )
    return out


# --- compressed streams (joblib, pandas) ----------------------------------------------------

_MAGICS = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x5d\x00\x00", "lzma"),
    (b"\x04\x22\x4d\x18", "lz4"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"ZF", "joblib-zlib"),
)


def compression(head: bytes) -> str:
    """The compression a loader would undo (joblib detects it by these prefixes, pandas by
    the file's suffix); "" for none."""
    for magic, name in _MAGICS:
        if head.startswith(magic):
            return name
    if len(head) >= 2 and head[0] == 0x78 and (head[0] << 8 | head[1]) % 31 == 0:
        return "zlib"
    return ""


def decompress(buf: Any, start: int, end: int, kind: str, scope: Any) -> tuple[bytes | None, str]:
    """(decompressed bytes, "") or (None, why it could not be judged); bounded by the file's
    inflation budget. A stream that is not valid gives (None, ""): no loader gets data."""
    limit = MAX_INFLATED - scope.inflated
    raw = io.BufferedReader(BufferFile(buf, start, end))
    openers: dict[str, Any] = {
        "gzip": lambda f: gzip.GzipFile(fileobj=f),
        "bz2": bz2.BZ2File,
        "xz": lzma.LZMAFile,
        "lzma": lzma.LZMAFile,
    }
    try:
        if kind in openers:
            with openers[kind](raw) as f:
                data = f.read(limit + 1)
        elif kind in ("zlib", "joblib-zlib"):
            skip = 0
            if kind == "joblib-zlib":  # joblib < 0.10: "ZF", the length in 19 hex chars, zlib
                skip = 21 + (bytes(buf[start + 21 : start + 22]) == b" ")
            data = _inflate(buf, start + skip, end, limit + 1)
        else:
            return None, f"{kind}-compressed: not judged here (a loader with {kind} reads it)"
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error):
        return None, ""
    if len(data) > limit:
        return None, f"{kind}-compressed to over {limit >> 20} MiB: not judged completely"
    scope.inflated += len(data)
    return data, ""


def _inflate(buf: Any, start: int, end: int, most: int) -> bytes:
    """``zlib.decompressobj().decompress(bytes(buf[start:end]), most)``, fed 1 MiB at a time:
    the same bytes and errors without copying the whole input first (a zlib magic at the
    start of a 4 GB weights file made that copy)."""
    d = zlib.decompressobj()
    out: list[bytes] = []
    got = 0
    for at in range(start, end, 1 << 20):
        out.append(d.decompress(buf[at : min(end, at + (1 << 20))], most - got))
        got += len(out[-1])
        if got >= most or d.eof:
            break
    return b"".join(out)


# --- ColossalAI's flattened optimizer safetensors ------------------------------------------


def _plainly_without_values(raw: bytes) -> bool:
    """The header is a JSON object whose ``__metadata__`` (an object, or absent) lists no
    ``non_tensor_keys``: decided by the listing's own checks of these bytes, done once per
    process (the listing then reuses them), instead of a second ``json.loads``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    checked = checked_header(raw, text) if text.startswith("{") else None
    metadata = None if checked is None else plain_metadata(raw, checked)
    return metadata is not None and "non_tensor_keys" not in metadata


def judge_safetensors_values(
    buf: Any, start: int, end: int, where: str, head: bytes, scope: Any
) -> Any:
    """The values ColossalAI lists under ``non_tensor_keys`` are pickles stored as U8 tensors;
    its loader unpickles each."""
    out = Judged()
    if len(head) < 9 or head[8:9] != b"{":
        return out
    (n,) = struct.unpack("<Q", head[:8])
    if n > _MAX_SAFETENSORS_HEADER or 8 + n > end - start:
        return out
    raw = bytes(buf[start + 8 : start + 8 + n])
    if _plainly_without_values(raw):
        out.formats.append("safetensors")
        return out  # what json.loads would give: no pickled values to judge
    try:
        header = json.loads(raw)
        keys = json.loads(header.get("__metadata__", {}).get("non_tensor_keys", "[]"))
    except (ValueError, AttributeError, TypeError, RecursionError):
        return out
    out.formats.append("safetensors")
    if not isinstance(keys, list):
        return out
    base = start + 8 + n
    for key in keys:
        entry = header.get(key) if isinstance(key, str) else None
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) for o in offsets)
        ):
            continue
        a, b = base + offsets[0], min(base + offsets[1], end)
        walk = scope.walk(buf, a, b)
        if walk.did_anything:
            out.streams.append(Stream(f"{where} (pickled value {key!r})", walk, buf))
    return out
