"""The fast path: tensor bytes copied from source files straight into the output file.

``torch.save`` stores storages uncompressed and safetensors stores raw tensor data, so a tensor
that is one dense row-major block of its storage is, byte for byte, a range of its source file.
Those ranges are copied with ``os.copy_file_range`` (in-kernel, no user-space buffer), falling
back to ``os.sendfile`` and then to a buffered read/write, without deserialising anything.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import TruncatedFileError
from ..types import TensorRecord
from .plan import Piece

if TYPE_CHECKING:
    import torch

    from ..io.mapped import MappedFile

CHUNK = 64 * 2**20
BUFFER = 8 * 2**20
Tick = Callable[[int], None]


def record_pieces(root: Path, record: TensorRecord) -> tuple[Piece, ...] | None:
    """The byte range of a source record when its bytes can be copied as they are, else None.

    ``root`` is the view's path (a file, or the folder that ``record.file`` is relative to).
    """
    if record.offset is None or not record.file:
        return None
    path = root if root.is_file() else root / record.file
    kind = _file_kind(str(path))
    if kind == "safetensors":
        return (Piece(str(path), record.offset, record.nbytes),)
    if kind == "torch" and _torch_contiguous(str(path), record):
        return (Piece(str(path), record.offset, record.nbytes),)
    return None


@functools.lru_cache(maxsize=256)
def _file_kind(path: str) -> str:
    from ..io.torch_file import sniff_torch
    from ..readers.safetensors_file import looks_like_safetensors

    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return ""
    if looks_like_safetensors(head):
        return "safetensors"
    return "torch" if sniff_torch(head) is not None else ""


@functools.lru_cache(maxsize=64)
def _torch_layout(path: str, mtime_ns: int) -> dict[tuple[int, tuple[int, ...], str], bool]:
    """(absolute offset, shape, dtype) -> whether that tensor is a dense block of its storage."""
    from ..io.torch_file import iter_lazy_tensors
    from ..readers.torch_pickle import torch_structure

    structure = torch_structure(Path(path))
    if structure.byteorder != "little":
        return {}
    out: dict[tuple[int, tuple[int, ...], str], bool] = {}
    for t in iter_lazy_tensors(structure.root):
        key = (structure.tensor_offset(t), tuple(t.shape), str(t.dtype).removeprefix("torch."))
        out[key] = out.get(key, True) and t.is_contiguous_view()
    return out


def _torch_contiguous(path: str, record: TensorRecord) -> bool:
    layout = _torch_layout(path, os.stat(path).st_mtime_ns)
    return layout.get((record.offset or 0, tuple(record.shape), record.dtype), False)


def copy_pieces(
    out_fd: int,
    out_offset: int,
    pieces: tuple[Piece, ...],
    tick: Tick | None = None,
    cancel: threading.Event | None = None,
) -> int:
    """Copy ``pieces`` into ``out_fd`` at ``out_offset``; returns the bytes written."""
    written = 0
    for piece in pieces:
        with open(piece.file, "rb") as src:
            size = os.fstat(src.fileno()).st_size
            if piece.offset + piece.nbytes > size:
                raise TruncatedFileError(
                    piece.file,
                    f"bytes up to {piece.offset + piece.nbytes}",
                    f"a file of {size} bytes",
                    "The source changed or is truncated.",
                )
            done = 0
            while done < piece.nbytes:
                if cancel is not None and cancel.is_set():
                    return written
                n = min(CHUNK, piece.nbytes - done)
                _copy_range(src.fileno(), piece.offset + done, out_fd, out_offset + written, n)
                done += n
                written += n
                if tick is not None:
                    tick(n)
    return written


def _copy_range(src_fd: int, src_off: int, dst_fd: int, dst_off: int, n: int) -> None:
    while n > 0:
        try:
            k = os.copy_file_range(src_fd, dst_fd, n, src_off, dst_off)
        except (OSError, AttributeError):
            k = 0
        if k <= 0:
            _buffered(src_fd, src_off, dst_fd, dst_off, n)
            return
        src_off, dst_off, n = src_off + k, dst_off + k, n - k


def _buffered(src_fd: int, src_off: int, dst_fd: int, dst_off: int, n: int) -> None:
    while n > 0:
        data = os.pread(src_fd, min(BUFFER, n), src_off)
        if not data:
            raise TruncatedFileError(None, f"{n} more source bytes", "end of file")
        k = os.pwrite(dst_fd, data, dst_off)
        src_off, dst_off, n = src_off + k, dst_off + k, n - k


def read_pieces(pieces: tuple[Piece, ...], dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor made of ``pieces`` (one fresh buffer of its own size)."""
    import torch

    from ..io.mapped import torch_dtype

    total = sum(p.nbytes for p in pieces)
    buf = torch.empty(total, dtype=torch.uint8)
    view = memoryview(buf.numpy())  # type: ignore[arg-type]
    pos = 0
    for p in pieces:
        with open(p.file, "rb") as f:
            got = os.preadv(f.fileno(), [view[pos : pos + p.nbytes]], p.offset)
        if got != p.nbytes:
            raise TruncatedFileError(p.file, f"{p.nbytes} bytes at {p.offset}", f"{got}")
        pos += p.nbytes
    return buf.view(torch_dtype(dtype)).reshape(shape)


def piece_bytes(piece: Piece) -> torch.Tensor:
    """A uint8 view of one piece, mapped from its file (no copy)."""
    st = os.stat(piece.file)
    return _mapped(piece.file, st.st_mtime_ns, st.st_size).bytes_tensor(piece.offset, piece.nbytes)


@functools.lru_cache(maxsize=64)
def _mapped(path: str, mtime_ns: int, size: int) -> MappedFile:
    from ..io.mapped import MappedFile

    return MappedFile(path)
