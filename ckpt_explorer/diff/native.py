"""Byte comparison of raw tensor memory (libc memcmp, with a torch fallback)."""

from __future__ import annotations

from typing import Any

from ..io.memcmp import libc_memcmp


def bytes_equal(a: Any, b: Any) -> bool:
    """Whether two contiguous CPU tensors (or numpy arrays) hold the same bytes (no float
    semantics: NaN == NaN when the bits agree, -0.0 != 0.0)."""
    na, nb = a.nbytes, b.nbytes
    if na != nb:
        return False
    if na == 0:
        return True
    fn = libc_memcmp()
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
