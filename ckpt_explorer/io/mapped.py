"""Tensors that live in a file: read on demand through the store, never written back.

A local file is mapped once (copy-on-write) and each tensor is a view of the mapping; a file
without an OS path (a remote object) gives each tensor exactly its byte range, read when the
tensor is asked for. torch is imported by the functions that make tensors, never at import
(listing needs none).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from typing import TYPE_CHECKING, NamedTuple

from ..errors import TruncatedFileError
from ..types import shape_numel
from .location import Location, PathLike, as_location
from .torch_names import DTYPES, DType, torch_dtype

if TYPE_CHECKING:
    import torch


class MappedFile:
    """One file shared by every tensor read from it: mapped once where it is a local file,
    read range by range through its store otherwise."""

    def __init__(self, path: PathLike) -> None:
        self.path: Location = as_location(path)
        self._local = self.path.local_path()
        self._map: mmap.mmap | None = None
        self._size = 0
        self._lock = threading.Lock()

    def _mapping(self) -> mmap.mmap:
        assert self._local is not None
        with self._lock:
            if self._map is None:
                with open(self._local, "rb") as f:
                    self._size = os.fstat(f.fileno()).st_size
                    self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            return self._map

    def bytes_tensor(self, offset: int, nbytes: int) -> torch.Tensor:
        """A uint8 tensor over ``[offset, offset + nbytes)`` of the file (a view of the
        mapping for a local file; the range read into memory otherwise)."""
        import torch

        if nbytes == 0:
            return torch.empty(0, dtype=torch.uint8)
        if self._local is None:
            data = bytearray(self._read(offset, nbytes))
            return torch.frombuffer(data, dtype=torch.uint8)
        mapping = self._checked(offset, nbytes)
        return torch.frombuffer(mapping, dtype=torch.uint8, count=nbytes, offset=offset)

    def byte_view(self, offset: int, nbytes: int) -> memoryview:
        """``[offset, offset + nbytes)`` of the file as a memoryview (no torch)."""
        if nbytes == 0:
            return memoryview(b"")
        if self._local is None:
            return memoryview(self._read(offset, nbytes))
        return memoryview(self._checked(offset, nbytes))[offset : offset + nbytes]

    def release(self, offset: int, nbytes: int) -> None:
        """Drop this process's pages of ``[offset, offset + nbytes)`` (the whole pages inside
        it) from the mapping: a reader that streams through a file keeps its resident memory
        near what it still reads. The bytes stay valid: a later access reads them again from
        the file (the pages were never written). No-op without a mapping or ``madvise``."""
        mapping = self._map
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if mapping is None or advice is None or nbytes <= 0:
            return
        page = mmap.PAGESIZE
        start = -(-offset // page) * page
        stop = min(offset + nbytes, self._size) // page * page
        if stop > start:
            with contextlib.suppress(OSError, ValueError):  # advice only
                mapping.madvise(advice, start, stop - start)

    def _read(self, offset: int, nbytes: int) -> bytes:
        """Exactly ``[offset, offset + nbytes)`` through the store (tensor data: not kept)."""
        data = self.path.read_range(offset, offset + nbytes, keep=False)
        if len(data) != nbytes:
            raise TruncatedFileError(
                self.path,
                f"bytes up to {offset + nbytes}",
                f"an object of {offset + len(data)} bytes",
                "The object was truncated or changed after it was opened; open it again.",
            )
        return data

    def _checked(self, offset: int, nbytes: int) -> mmap.mmap:
        """The mapping, once ``[offset, offset + nbytes)`` is known to lie in the file."""
        mapping = self._mapping()
        assert self._local is not None
        current = os.stat(self._local).st_size
        if offset + nbytes > min(self._size, current):
            raise TruncatedFileError(
                self.path,
                f"bytes up to {offset + nbytes}",
                f"a file of {current} bytes",
                "The file was truncated or changed after it was opened; open it again.",
            )
        return mapping


class MappedTensor(NamedTuple):
    """A record's loader: the tensor at a storage of a mapped file (a view, never a copy).

    :meth:`dense_bytes` gives its elements' bytes without torch when they are one dense
    little-endian block, for the few values listing reads (an optimizer's ``step``). A named
    tuple (immutable, and cheap to make by the ten thousand: one per listed tensor).
    """

    mapped: MappedFile
    offset: int  # the storage's first byte in the file
    nbytes: int  # the storage's bytes
    dtype: str  # torch dtype name, e.g. "bfloat16"
    shape: tuple[int, ...]
    stride: tuple[int, ...] | None = None  # None: dense row-major
    storage_offset: int = 0  # in elements
    byteorder: str = "little"

    def __call__(self) -> torch.Tensor:
        raw = self.mapped.bytes_tensor(self.offset, self.nbytes)
        dtype = torch_dtype(self.dtype, self.mapped.path)
        return view_bytes(raw, dtype, self.shape, self.stride, self.storage_offset, self.byteorder)

    def dense_bytes(self) -> memoryview | None:
        """The elements' bytes in row-major order, or None when they are not one dense
        little-endian block of the storage (or the dtype is unknown here)."""
        known = DTYPES.get(self.dtype)
        if known is None or self.byteorder != "little":
            return None
        numel = shape_numel(self.shape)
        if self.stride is not None and numel > 1:
            expected = 1
            for size, stride in zip(reversed(self.shape), reversed(self.stride), strict=True):
                if size != 1 and stride != expected:
                    return None
                expected *= size
        start = self.storage_offset * known.itemsize
        nbytes = numel * known.itemsize
        if start + nbytes > self.nbytes:
            return None
        return self.mapped.byte_view(self.offset + start, nbytes)


def view_bytes(
    raw: torch.Tensor,
    dtype: torch.dtype | DType,
    shape: tuple[int, ...],
    stride: tuple[int, ...] | None = None,
    storage_offset: int = 0,
    byteorder: str = "little",
) -> torch.Tensor:
    """Interpret a uint8 storage as a tensor of ``dtype`` with the given geometry."""
    if isinstance(dtype, DType):
        dtype = dtype.to_torch()
    itemsize = dtype.itemsize
    usable = raw.numel() - raw.numel() % itemsize
    raw = raw[:usable]
    if byteorder == "big" and itemsize > 1:
        raw = raw.view(-1, itemsize).flip(1).reshape(-1)
    elif itemsize > 1 and raw.numel() and raw.data_ptr() % itemsize:
        raw = raw.clone()  # unaligned (e.g. unpadded safetensors): copy to aligned memory
    typed = raw.view(dtype)
    if stride is None:
        numel = 1
        for d in shape:
            numel *= d
        return typed[storage_offset : storage_offset + numel].view(shape)
    return typed.as_strided(shape, stride, storage_offset)
