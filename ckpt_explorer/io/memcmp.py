"""libc's ``memcmp`` through ctypes, looked up once (None where no C library can be loaded)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


@functools.cache
def libc_memcmp() -> Any:
    """``memcmp(a, b, n)`` on two addresses, or None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        fn = libc.memcmp
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        return fn
    except (OSError, AttributeError):
        return None
