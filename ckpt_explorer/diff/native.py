"""Byte comparison of raw tensor memory (libc memcmp, with a torch fallback)."""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

_memcmp: ctypes._CFuncPtr | None = None  # type: ignore[name-defined]
_memcmp_loaded = False


def _load_memcmp() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    global _memcmp, _memcmp_loaded
    if not _memcmp_loaded:
        _memcmp_loaded = True
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
            fn = libc.memcmp
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
            _memcmp = fn
        except (OSError, AttributeError):
            _memcmp = None
    return _memcmp


def bytes_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two contiguous CPU tensors hold the same bytes (no float semantics: NaN == NaN
    when the bits agree, -0.0 != 0.0)."""
    import torch

    na = a.numel() * a.element_size()
    if na != b.numel() * b.element_size():
        return False
    if na == 0:
        return True
    fn = _load_memcmp()
    if fn is not None:
        return int(fn(a.data_ptr(), b.data_ptr(), na)) == 0
    ua = a.reshape(-1).view(torch.uint8)
    ub = b.reshape(-1).view(torch.uint8)
    return bool(torch.equal(ua, ub))
