"""Byte comparison of raw tensor memory (libc memcmp, with a torch fallback)."""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

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


def bytes_equal(a: Any, b: Any) -> bool:
    """Whether two contiguous CPU tensors (or numpy arrays) hold the same bytes (no float
    semantics: NaN == NaN when the bits agree, -0.0 != 0.0)."""
    na, nb = a.nbytes, b.nbytes
    if na != nb:
        return False
    if na == 0:
        return True
    fn = _load_memcmp()
    torch_like = hasattr(a, "data_ptr")
    if fn is not None:
        pa = a.data_ptr() if torch_like else a.ctypes.data
        pb = b.data_ptr() if torch_like else b.ctypes.data
        return int(fn(pa, pb, na)) == 0
    if not torch_like:
        return bool(a.view("uint8").tobytes() == b.view("uint8").tobytes())
    import torch

    ua = a.reshape(-1).view(torch.uint8)
    ub = b.reshape(-1).view(torch.uint8)
    return bool(torch.equal(ua, ub))
