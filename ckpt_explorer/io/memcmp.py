"""libc's ``memcmp`` through ctypes, looked up once (None where no C library can be loaded).

The symbol is taken from the running process first (``dlopen(NULL)``: the interpreter is
linked against libc), so no ``ldconfig -p`` child process is started to find the library;
``ctypes.util.find_library`` is the fallback where the process does not export it.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any


@functools.cache
def libc_memcmp() -> Any:
    """``memcmp(a, b, n)`` on two addresses, or None."""
    for find in (lambda: None, _find_libc):
        try:
            fn = ctypes.CDLL(find()).memcmp
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        return fn
    return None


def _find_libc() -> str | None:
    from ctypes.util import find_library

    return find_library("c")
