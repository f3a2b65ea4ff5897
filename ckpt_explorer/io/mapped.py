"""Tensors that live in a file: mmapped on demand, copy-on-write, never writing back."""

from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path

import torch

from ..errors import CkptExplorerError, TruncatedFileError


def torch_dtype(name: str, path: str | Path | None = None) -> torch.dtype:
    """``"bfloat16"`` -> ``torch.bfloat16``; a clear error for dtypes this torch lacks."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise CkptExplorerError(
            path,
            f"a dtype this torch ({torch.__version__}) supports",
            name,
            "Upgrade torch to read tensors of this dtype; listing still works.",
        )
    return dtype


class MappedFile:
    """One file mapped once, shared by every tensor read from it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._map: mmap.mmap | None = None
        self._size = 0
        self._lock = threading.Lock()

    def _mapping(self) -> mmap.mmap:
        with self._lock:
            if self._map is None:
                with open(self.path, "rb") as f:
                    self._size = os.fstat(f.fileno()).st_size
                    self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            return self._map

    def bytes_tensor(self, offset: int, nbytes: int) -> torch.Tensor:
        """A uint8 tensor over ``[offset, offset + nbytes)`` of the file, without copying."""
        if nbytes == 0:
            return torch.empty(0, dtype=torch.uint8)
        mapping = self._mapping()
        current = os.stat(self.path).st_size
        if offset + nbytes > min(self._size, current):
            raise TruncatedFileError(
                self.path,
                f"bytes up to {offset + nbytes}",
                f"a file of {current} bytes",
                "The file was truncated or changed after it was opened; open it again.",
            )
        return torch.frombuffer(mapping, dtype=torch.uint8, count=nbytes, offset=offset)


def view_bytes(
    raw: torch.Tensor,
    dtype: torch.dtype,
    shape: tuple[int, ...],
    stride: tuple[int, ...] | None = None,
    storage_offset: int = 0,
    byteorder: str = "little",
) -> torch.Tensor:
    """Interpret a uint8 storage as a tensor of ``dtype`` with the given geometry."""
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
