"""Every pickle a checkpoint holds, as bytes with their place: file, zip member, offset.

Header-only: the pickles of a torch zip are its ``.pkl`` members (storage records under
``data/`` are never read); a legacy torch file's five pickles precede its storages; a plain
pickle file (DCP ``.metadata``, ``*.pkl``) is one pickle. Tensor bytes are never read.
"""

from __future__ import annotations

import json
import mmap
import os
import pickletools
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..io.torch_file import LEGACY_MAGIC, MAX_PICKLE_BYTES, ZIP_MAGIC
from .opcodes import Buffer
from .zip_layout import members, read_member

LEGACY_PICKLES = ("magic number", "protocol version", "system info", "data", "storage keys")
# a file with one of these names (or no extension) may be a plain pickle in any protocol
PICKLE_SUFFIXES = {".pkl", ".pickle", ".pt", ".pth", ".bin", ".ckpt", ".metadata", ".tar", ""}
TORCH_SUFFIXES = {".pt", ".pth", ".bin", ".ckpt"}
_OPCODE_STARTS = set(b"(]})NcKJIMFSVXTUBCGLlo\x80\x88\x89\x8a\x8c\x93\x95")
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
        entries = members(zf, raw)
        last_pkl = [m for m in entries if m.info.filename.endswith("/data.pkl")][-1:]
        for m in entries:
            name = m.info.filename
            _top, _, rest = name.partition("/")
            if rest.startswith("data/") or name.endswith("/"):
                continue  # storage records: raw tensor bytes, never unpickled
            if m.info.file_size > MAX_PICKLE_BYTES:
                continue
            try:
                data = read_member(raw, m)
            except ValueError:
                continue  # said by the container rule
            if not (name.endswith(".pkl") or (data[:1] == b"\x80" and data[1:2] < b"\x06")):
                continue
            yield PickleSource(path, name, data, what="zip member", torch_loads=m in last_pkl)


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
