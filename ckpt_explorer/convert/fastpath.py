"""The fast path: tensor bytes copied from source files straight into the output file.

``torch.save`` stores storages uncompressed and safetensors stores raw tensor data, so a tensor
that is one dense row-major block of its storage is, byte for byte, a range of its source file.
Those ranges are copied without deserialising anything: with ``os.copy_file_range`` (in the
kernel) where source and destination offsets sit at the same place within a page, otherwise
through one reused 1 MiB buffer (``preadv``/``pwrite``). In the writer the kernel copy of
ranges that straddle pages cost more CPU than the buffer, not less: on a 1 GiB ``.bin`` of
1,057 tensors about 1.1 s of process CPU against 0.9 s (4 alternating runs, busy 2-core
machine, Linux 6.18, ext4), and safetensors packs tensors back to back, torch zips align
storages to 64 bytes, so offsets rarely agree. Where the kernel refuses (another filesystem,
an old kernel) the range goes through the buffer, and later ranges between the same two
filesystems go there directly. A remote source's ranges are read through its store (exactly
those bytes) and written the same way.

The buffered copy writes 1 MiB per ``pwrite``. The size of one write bounds the page-cache folio the
kernel allocates for it (ext4 sizes a new folio to the write and to its alignment in the
file), and on a VM whose guest reports free blocks of 2 MiB and more to the host
(``virtio_balloon`` free-page reporting) large folios are cut from reported blocks, whose
pages each fault in the host on first touch. Smaller writes were tried against that
(2026-12-07, 4-5 alternating rounds per state, 1 GiB in 1,057 and in 4,661 tensors): a bare
copy of 1 GiB written from offset 0 took 0.45 s of system time in 64-256 KiB pieces against
0.6-1.8 s in 1 MiB pieces, but the conversion (its writes start at an offset that is not
page-aligned, after the header, which also bounds its folios) paid more CPU in every state:
64 KiB +0.25-0.3 s per GiB, 128 KiB +0.1-0.2 s, 256 KiB +0.07 s, and the after-idle cost did
not show for 1 MiB pieces in those runs. Not kept.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import TruncatedFileError
from ..io.location import Location, as_location
from ..types import TensorRecord
from .bytecheck import OpenFiles
from .plan_types import Piece

if TYPE_CHECKING:
    import torch

    from ..contracts import Cancel
    from ..io.mapped import MappedFile

CHUNK = 64 * 2**20
BUFFER = 2**20
PAGE = 4096
_local = threading.local()
Tick = Callable[[int], None]


def record_pieces(
    root: Location | Path,
    record: TensorRecord,
    memo: dict[str, tuple[str | Location, str, int]] | None = None,
) -> tuple[Piece, ...] | None:
    """The byte range of a source record when its bytes can be copied as they are, else None.

    ``root`` is the view's path (a file, or the folder that ``record.file`` is relative to).
    ``memo``: for the records of one view, file -> (path, kind, mtime), which saves a few
    ``stat`` calls per tensor (a fresh dict per view and use).
    """
    if record.offset is None or not record.file:
        return None
    known = memo.get(record.file) if memo is not None else None
    if known is None:
        base = as_location(root)
        path = base if base.is_file() else base / record.file
        try:
            st = path.stat()
        except OSError:
            return None
        local = path.local_path()
        where: str | Location = str(local) if local is not None else path
        known = (where, _file_kind(where, st.st_mtime_ns, st.st_size), st.st_mtime_ns)
        if memo is not None:
            memo[record.file] = known
    where, kind, mtime_ns = known
    if kind == "safetensors":
        return (Piece(where, record.offset, record.nbytes),)
    if kind == "torch" and _torch_contiguous(where, mtime_ns, record):
        return (Piece(where, record.offset, record.nbytes),)
    return None


@functools.lru_cache(maxsize=256)
def _file_kind(path: str | Location, mtime_ns: int, size: int) -> str:
    from ..io.torch_file import sniff_torch
    from ..readers.safetensors_file import looks_like_safetensors

    try:
        head = as_location(path).read_range(0, 16)
    except OSError:
        return ""
    if looks_like_safetensors(head):
        return "safetensors"
    return "torch" if sniff_torch(head) is not None else ""


@functools.lru_cache(maxsize=64)
def _torch_layout(
    path: str | Location, mtime_ns: int
) -> dict[tuple[int, tuple[int, ...], str], bool]:
    """(absolute offset, shape, dtype) -> whether that tensor is a dense block of its storage."""
    from ..io.torch_file import iter_lazy_tensors
    from ..readers.torch_pickle import torch_structure

    structure = torch_structure(as_location(path))
    if structure.byteorder != "little":
        return {}
    out: dict[tuple[int, tuple[int, ...], str], bool] = {}
    for t in iter_lazy_tensors(structure.root):
        key = (structure.tensor_offset(t), tuple(t.shape), str(t.dtype).removeprefix("torch."))
        out[key] = out.get(key, True) and t.is_contiguous_view()
    return out


def _torch_contiguous(path: str | Location, mtime_ns: int, record: TensorRecord) -> bool:
    layout = _torch_layout(path, mtime_ns)
    return layout.get((record.offset or 0, tuple(record.shape), record.dtype), False)


def add_pieces(run: list[Piece], pieces: tuple[Piece, ...]) -> None:
    """Append ``pieces`` to ``run``, merging a piece into the last one where it continues it
    in the same file (tensors stored back to back are then copied in one call)."""
    for p in pieces:
        last = run[-1] if run else None
        if last is not None and last.file == p.file and last.offset + last.nbytes == p.offset:
            run[-1] = Piece(p.file, last.offset, last.nbytes + p.nbytes)
        else:
            run.append(p)


def copy_pieces(
    out_fd: int,
    out_offset: int,
    pieces: tuple[Piece, ...],
    tick: Tick | None = None,
    cancel: Cancel | None = None,
    files: OpenFiles | None = None,
) -> int:
    """Copy ``pieces`` into ``out_fd`` at ``out_offset``; returns the bytes written.

    ``files`` keeps source descriptors open across calls (one open per file, not per piece).
    """
    own = files is None
    files = files or OpenFiles()
    written = 0
    try:
        for piece in pieces:
            if isinstance(piece.file, Location):
                written += _copy_remote(piece, out_fd, out_offset + written, tick, cancel)
                continue
            fd, size = files.get(piece.file)
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
                _copy_range(fd, piece.offset + done, out_fd, out_offset + written, n)
                done += n
                written += n
                if tick is not None:
                    tick(n)
    finally:
        if own:
            files.close()
    return written


def _copy_remote(
    piece: Piece, out_fd: int, out_offset: int, tick: Tick | None, cancel: Cancel | None
) -> int:
    """Copy a piece of a remote object: its bytes read through the store, :data:`CHUNK` at a
    time."""
    assert isinstance(piece.file, Location)
    done = 0
    while done < piece.nbytes:
        if cancel is not None and cancel.is_set():
            break
        n = min(CHUNK, piece.nbytes - done)
        data = memoryview(_piece_range(piece, done, n))
        at = 0
        while at < n:
            at += os.pwrite(out_fd, data[at:], out_offset + done + at)
        done += n
        if tick is not None:
            tick(n)
    return done


# Alike in shape with io/mapped's _read: each reads through its own store and says its own cause.
def _piece_range(piece: Piece, skip: int, n: int) -> bytes:
    """``n`` bytes of a remote piece from ``skip`` bytes into it (all of them, or an error)."""
    assert isinstance(piece.file, Location)
    start = piece.offset + skip
    data = piece.file.read_range(start, start + n, keep=False)
    if len(data) != n:
        raise TruncatedFileError(
            piece.file,
            f"{n} bytes at {start}",
            f"{len(data)}",
            "The source changed or is truncated.",
        )
    return data


_NO_KERNEL_COPY: set[tuple[int, int]] = set()  # (source, destination) st_dev refused


def _copy_range(src_fd: int, src_off: int, dst_fd: int, dst_off: int, n: int) -> None:
    devices = (os.fstat(src_fd).st_dev, os.fstat(dst_fd).st_dev) if _NO_KERNEL_COPY else None
    while (
        n > 0
        and (src_off - dst_off) % PAGE == 0
        and (devices is None or devices not in _NO_KERNEL_COPY)
    ):
        try:
            k = os.copy_file_range(src_fd, dst_fd, n, src_off, dst_off)
        except (OSError, AttributeError):
            _NO_KERNEL_COPY.add((os.fstat(src_fd).st_dev, os.fstat(dst_fd).st_dev))
            break
        if k <= 0:  # the source ends early: the buffered copy says so
            break
        src_off, dst_off, n = src_off + k, dst_off + k, n - k
    if n > 0:
        _buffered(src_fd, src_off, dst_fd, dst_off, n)


def _buffer() -> memoryview:
    """This thread's copy buffer (allocated once)."""
    buf: memoryview | None = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = memoryview(bytearray(BUFFER))
    return buf


def _buffered(src_fd: int, src_off: int, dst_fd: int, dst_off: int, n: int) -> None:
    buf = _buffer()
    while n > 0:
        got = os.preadv(src_fd, [buf[: min(BUFFER, n)]], src_off)
        if got <= 0:
            raise TruncatedFileError(None, f"{n} more source bytes", "end of file")
        done = 0
        while done < got:
            done += os.pwrite(dst_fd, buf[done:got], dst_off + done)
        src_off, dst_off, n = src_off + got, dst_off + got, n - got


def read_pieces(pieces: tuple[Piece, ...], dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor made of ``pieces`` (one fresh buffer of its own size)."""
    import torch

    from ..io.mapped import torch_dtype

    total = sum(p.nbytes for p in pieces)
    buf = torch.empty(total, dtype=torch.uint8)
    view = memoryview(buf.numpy())  # type: ignore[arg-type]
    pos = 0
    for p in pieces:
        if isinstance(p.file, Location):
            view[pos : pos + p.nbytes] = _piece_range(p, 0, p.nbytes)
            pos += p.nbytes
            continue
        with open(p.file, "rb") as f:
            got = os.preadv(f.fileno(), [view[pos : pos + p.nbytes]], p.offset)
        if got != p.nbytes:
            raise TruncatedFileError(p.file, f"{p.nbytes} bytes at {p.offset}", f"{got}")
        pos += p.nbytes
    return buf.view(torch_dtype(dtype)).reshape(shape)


def piece_bytes(piece: Piece) -> torch.Tensor:
    """A uint8 view of one piece, mapped from its file (no copy; a remote piece is read)."""
    if isinstance(piece.file, Location):
        from ..io.mapped import MappedFile

        return MappedFile(piece.file).bytes_tensor(piece.offset, piece.nbytes)
    st = os.stat(piece.file)
    return _mapped(piece.file, st.st_mtime_ns, st.st_size).bytes_tensor(piece.offset, piece.nbytes)


@functools.lru_cache(maxsize=64)
def _mapped(path: str, mtime_ns: int, size: int) -> MappedFile:
    from ..io.mapped import MappedFile

    return MappedFile(path)
