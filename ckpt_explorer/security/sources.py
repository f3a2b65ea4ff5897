"""Every pickle a checkpoint holds, as bytes with their place: file, zip member, offset.

Header-only: the pickles of a torch zip are its ``.pkl`` members (storage records under
``data/`` are never read); a legacy torch file's five pickles precede its storages; a plain
pickle file (DCP ``.metadata``, ``*.pkl``) is one pickle. Tensor bytes are never read.
"""

from __future__ import annotations

import io
import json
import mmap
import os
import pickletools
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..io.torch_file import LEGACY_MAGIC, MAX_PICKLE_BYTES, ZIP_MAGIC
from .opcodes import Buffer
from .zip_layout import Member, is_pt2, members, read_member

LEGACY_PICKLES = ("magic number", "protocol version", "system info", "data", "storage keys")
# a file with one of these names (or no extension) may be a plain pickle in any protocol
PICKLE_SUFFIXES = {".pkl", ".pickle", ".pt", ".pth", ".bin", ".ckpt", ".metadata", ".tar", ""}
TORCH_SUFFIXES = {".pt", ".pth", ".bin", ".ckpt"}
_OPCODE_STARTS = set(b"(]})NcKJIMFSVXTUBCGLlo\x80\x88\x89\x8a\x8c\x93\x95")
MAX_ZIP_DEPTH = 3  # a .pt2 holds torch.save zips one level down
MAX_NESTED_ZIPS = 4096
MAX_NESTED_BYTES = 64 * 2**20  # deflated nested zips are inflated in memory, up to this in all
PT2_NESTED = "torch.export.load unpickles without weights_only"
_OPCODES = {op.code.encode("latin-1")[0] for op in pickletools.opcodes}


@dataclass(frozen=True)
class PickleSource:
    """One pickle stream: where it is and its bytes (``offset`` into ``data`` where it starts).

    ``torch_loads`` is True where ``torch.load`` itself unpickles it (a torch zip's data.pkl,
    a legacy file's pickles): those are the ones ``weights_only`` decides about.
    """

    file: Path
    member: str | None
    data: Buffer
    start: int = 0
    what: str = "pickle"
    torch_loads: bool = False
    count: int = 1  # pickles in a row from ``start`` (5 in a legacy torch file)


def sniff(path: Path) -> str | None:
    """ "zip", "legacy", "pickle" or None (not a pickle container) from the first bytes."""
    if not path.is_file():  # a FIFO or device would block; a folder is walked by the caller
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(len(LEGACY_MAGIC))
    except OSError:
        return None
    if head.startswith(ZIP_MAGIC):
        return "zip"
    if head.startswith(LEGACY_MAGIC):
        return "legacy"
    if len(head) >= 9 and head[8:9] == b"{" and path.suffix == ".safetensors":
        return "safetensors"  # holds no pickle unless a writer put pickled values in it
    if len(head) >= 3 and head[0] == 0x80 and head[1] <= 5 and head[2] in _OPCODES:
        return "pickle"  # (a safetensors header length of 0x..80 is followed by zeros)
    suffix = path.suffix.lower() if not path.name.startswith(".") else path.name.lower()
    if head and head[0] in _OPCODE_STARTS and suffix in PICKLE_SUFFIXES:
        return "pickle"
    return None


def pickle_sources(path: Path, kind: str) -> Iterator[PickleSource]:
    """The pickles in one file of the given :func:`sniff` kind.

    Raises:
        OSError, zipfile.BadZipFile: the file cannot be read as that kind.
    """
    if kind == "zip":
        yield from _zip_sources(path)
    elif kind == "legacy":
        yield PickleSource(
            path, None, _head(path), what="legacy torch file", torch_loads=True, count=5
        )
    elif kind == "safetensors":
        yield from _pickled_values(path)
    elif kind == "pickle":  # torch.load reads a non-zip file's first pickle as a legacy file
        loads = path.suffix.lower() in TORCH_SUFFIXES
        yield PickleSource(path, None, _head(path), what="pickle file", torch_loads=loads)


def _head(path: Path) -> mmap.mmap:
    """The file mapped read-only: the pickles lead and only their pages are read."""
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _zip_sources(path: Path) -> Iterator[PickleSource]:
    with zipfile.ZipFile(path) as zf, open(path, "rb") as raw:
        yield from _archive_sources(path, zf, raw, "", is_pt2(zf, raw), 0, [0, 0])


def _archive_sources(
    path: Path,
    zf: zipfile.ZipFile,
    raw: BinaryIO,
    outer: str,
    pt2: bool,
    depth: int,
    budget: list[int],
) -> Iterator[PickleSource]:
    """The pickles of one zip (``outer``: the member chain it is nested in, "" at the top)."""
    entries = members(zf, raw)
    last_pkl = [m for m in entries if m.info.filename.endswith("/data.pkl")][-1:]
    storages = {m.info.filename.rsplit("/", 1)[0] + "/" for m in last_pkl}
    for m in entries:
        name = m.info.filename
        where = f"{outer} \u2192 {name}" if outer else name
        if name.endswith("/") or m.data_start < 0:
            continue
        _top, _, rest = name.partition("/")
        if rest.startswith("data/") and name.startswith(tuple(storages)) and rest[5:].isdigit():
            continue  # torch.save storage records: raw tensor bytes that torch never unpickles
        if _starts_zip(raw, m):
            yield from _nested_sources(path, raw, m, where, pt2, depth + 1, budget)
            continue
        if rest.startswith("data/") or m.info.file_size > MAX_PICKLE_BYTES:
            continue  # raw bytes (a .pt2's tensors); the nested zips among them are read above
        try:
            data = read_member(raw, m)
        except ValueError:
            continue  # said by the container rule
        if not (name.endswith(".pkl") or (data[:1] == b"\x80" and data[1:2] < b"\x06")):
            continue
        if outer and pt2:
            yield PickleSource(path, where, data, what=PT2_NESTED)
        else:
            loads = not outer and m in last_pkl
            yield PickleSource(path, where, data, what="zip member", torch_loads=loads)


def _starts_zip(raw: BinaryIO, m: Member) -> bool:
    """Whether a member's bytes begin with a zip's local header (read: 4 bytes, or a
    little of a deflated member)."""
    if m.info.file_size < 22:  # the smallest zip (an empty one) is 22 bytes
        return False
    raw.seek(m.data_start)
    if m.info.compress_type == zipfile.ZIP_STORED:
        return raw.read(4) == ZIP_MAGIC
    if m.info.compress_type != zipfile.ZIP_DEFLATED:
        return False
    try:
        return zlib.decompressobj(-15).decompress(raw.read(1024), 4) == ZIP_MAGIC
    except zlib.error:
        return False


def _nested_sources(
    path: Path, raw: BinaryIO, m: Member, where: str, pt2: bool, depth: int, budget: list[int]
) -> Iterator[PickleSource]:
    """The pickles of a zip stored as a member (a .pt2's ``torch.save`` blobs), bounded.

    Raises:
        ValueError: nested deeper than :data:`MAX_ZIP_DEPTH`, more than
            :data:`MAX_NESTED_ZIPS` nested zips, or deflated ones over
            :data:`MAX_NESTED_BYTES` in all (a zip bomb is refused, not inflated).
    """
    budget[0] += 1
    if depth > MAX_ZIP_DEPTH or budget[0] > MAX_NESTED_ZIPS:
        what = f"zips nested {depth} deep" if depth > MAX_ZIP_DEPTH else "too many nested zips"
        raise ValueError(f"{where}: {what} (a zip bomb?); refused, its pickles were not judged")
    inner: BinaryIO
    if m.info.compress_type == zipfile.ZIP_STORED:
        inner = io.BufferedReader(_Window(raw, m.data_start, m.info.compress_size))
    elif budget[1] + m.info.file_size > MAX_NESTED_BYTES:
        raise ValueError(
            f"{where}: compressed nested zips of {budget[1] + m.info.file_size} bytes in all, "
            f"over {MAX_NESTED_BYTES >> 20} MiB; refused, their pickles were not judged"
        )
    else:
        budget[1] += m.info.file_size
        inner = io.BytesIO(read_member(raw, m)[: MAX_NESTED_BYTES + 1])
    try:
        zf = zipfile.ZipFile(inner)
    except zipfile.BadZipFile:
        return  # bytes that start like a zip but are not one: torch cannot read them either
    with zf:
        yield from _archive_sources(path, zf, inner, where, pt2, depth, budget)


class _Window(io.RawIOBase):
    """A read-only, seekable view of ``length`` bytes of ``raw`` from ``start`` (a stored
    member read in place, so that a large nested zip is not copied)."""

    def __init__(self, raw: BinaryIO, start: int, length: int) -> None:
        self._raw, self._start, self._len, self._pos = raw, start, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._len}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, b: Any) -> int:
        n = max(0, min(len(b), self._len - self._pos))
        self._raw.seek(self._start + self._pos)
        data = self._raw.read(n)
        b[: len(data)] = data
        self._pos += len(data)
        return len(data)


def _pickled_values(path: Path) -> Iterator[PickleSource]:
    """ColossalAI's flattened optimizer safetensors: the values it lists under
    ``non_tensor_keys`` are pickles stored as U8 tensors (its loader unpickles them)."""
    from ..errors import CkptExplorerError
    from ..io.safetensors_header import read_header

    try:
        header = read_header(path)
        keys = json.loads(header.metadata.get("non_tensor_keys", "[]"))
    except (CkptExplorerError, ValueError, TypeError):
        return  # an unreadable header is integrity's finding; no pickle is judged here
    if not isinstance(keys, list):
        return
    entries = {e.name: e for e in header.entries}
    with open(path, "rb") as f:
        for key in keys:
            entry = entries.get(key) if isinstance(key, str) else None
            if entry is None or entry.end - entry.begin > MAX_PICKLE_BYTES:
                continue
            f.seek(header.data_start + entry.begin)
            data = f.read(entry.end - entry.begin)
            yield PickleSource(path, f"pickled value {key!r}", data, what="pickled value")


def iter_files(paths: list[Path]) -> Iterator[Path]:
    """Every regular file under ``paths`` (folders recursively, sorted, hidden ones too)."""
    for p in paths:
        if p.is_dir():
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(dirs)
                for name in sorted(files):
                    yield Path(root) / name
        else:
            yield p
