"""Tensor bytes as the arrays the compiled kernels read, with numpy alone (no torch).

A mapped file's dense tensor bytes become a flat numpy view of their raw elements
(:func:`raw_view`): bfloat16 as uint16 bit patterns, float16 as int16, float8 as uint8,
complex as its real pairs, the rest as themselves. :func:`kernel_array` then gives a chunk in
the dtype the kernels take, exactly as the torch path's conversion gives it: the raw
patterns where the kernels widen them, float8 through a 256-entry table of its float32
values, a wider float through numpy's exact cast, integers and bools as float64.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# torch dtype name -> (numpy raw dtype, element kind after flattening, narrow kernel dtype)
# element kind: the dtype a flattened torch tensor has (complex -> its real pairs), which
# decides whether two sides share a kernel dtype; narrow: "raw" when the kernels read the
# raw patterns as they are, "f32" through a cast to float32, "f64" through float64
_RAW: dict[str, tuple[str, str, str]] = {
    "bfloat16": ("uint16", "bfloat16", "raw"),
    "float16": ("int16", "float16", "raw"),
    "float32": ("float32", "float32", "raw"),
    "float64": ("float64", "float64", "raw"),
    "complex64": ("float32", "float32", "raw"),
    "complex128": ("float64", "float64", "raw"),
    "float8_e4m3fn": ("uint8", "float8_e4m3fn", "f32"),
    "float8_e5m2": ("uint8", "float8_e5m2", "f32"),
    "float8_e4m3fnuz": ("uint8", "float8_e4m3fnuz", "f32"),
    "float8_e5m2fnuz": ("uint8", "float8_e5m2fnuz", "f32"),
    "bool": ("uint8", "bool", "f64"),
    "uint8": ("uint8", "uint8", "f64"),
    "int8": ("int8", "int8", "f64"),
    "int16": ("int16", "int16", "f64"),
    "uint16": ("uint16", "uint16", "f64"),
    "int32": ("int32", "int32", "f64"),
    "uint32": ("uint32", "uint32", "f64"),
    "int64": ("int64", "int64", "f64"),
    "uint64": ("uint64", "uint64", "f64"),
}
# small floats that widen to float32 when the two sides differ (torch: floating, <= 2 bytes)
_SMALL_FLOATS = {"bfloat16", "float16"} | {k for k, v in _RAW.items() if v[2] == "f32"}
# float8 layouts: (exponent bits, mantissa bits, bias, "ieee" | "fn" | "fnuz")
_FP8 = {
    "float8_e4m3fn": (4, 3, 7, "fn"),
    "float8_e5m2": (5, 2, 15, "ieee"),
    "float8_e4m3fnuz": (4, 3, 8, "fnuz"),
    "float8_e5m2fnuz": (5, 2, 16, "fnuz"),
}
_tables: dict[str, Any] = {}


def supported(dtype: str) -> bool:
    """Whether :func:`raw_view` reads this torch dtype."""
    return dtype in _RAW


def element_kind(dtype: str) -> str:
    """The dtype of a flattened tensor of ``dtype`` (complex as its real parts)."""
    return _RAW[dtype][1]


def raw_view(data: memoryview, dtype: str) -> np.ndarray:
    """The flat raw elements of dense little-endian tensor bytes (a view, never a copy)."""
    import numpy as np

    raw = np.dtype(_RAW[dtype][0])
    usable = len(data) - len(data) % raw.itemsize
    return np.frombuffer(data, dtype=raw, count=usable // raw.itemsize)


def fp8_table(dtype: str) -> np.ndarray:
    """float32 value of each of the 256 bit patterns of a float8 dtype (exact)."""
    import numpy as np

    table = _tables.get(dtype)
    if table is not None:
        return table
    ebits, mbits, bias, kind = _FP8[dtype]
    values = np.empty(256, dtype=np.float32)
    emax = (1 << ebits) - 1
    for bits in range(256):
        sign = -1.0 if bits & 0x80 else 1.0
        e = (bits >> mbits) & emax
        m = bits & ((1 << mbits) - 1)
        if kind == "fnuz" and bits == 0x80:
            v = float("nan")
        elif kind == "ieee" and e == emax:
            v = sign * float("inf") if m == 0 else float("nan")
        elif kind == "fn" and e == emax and m == (1 << mbits) - 1:
            v = float("nan")
        elif e == 0:
            v = sign * m * 2.0 ** (1 - bias - mbits)
        else:
            v = sign * (1.0 + m / (1 << mbits)) * 2.0 ** (e - bias)
        values[bits] = v
    _tables[dtype] = values
    return values


def kernel_array(x: np.ndarray, dtype: str, wide: bool) -> np.ndarray:
    """Chunk ``x`` of :func:`raw_view` in the dtype the kernels read: with ``wide`` False (both
    sides share a dtype) raw patterns where the kernels widen them; with ``wide`` True (the
    sides differ) small floats as float32 and everything else as float64."""
    import numpy as np

    if not wide and _RAW[dtype][2] == "raw":
        return _aligned(x)
    if dtype in _FP8:
        return fp8_table(dtype)[x]
    if wide and dtype in _SMALL_FLOATS:
        if dtype == "bfloat16":
            return (x.astype(np.uint32) << 16).view(np.float32)
        return x.view(np.float16).astype(np.float32)
    if dtype == "bool":
        return (x != 0).astype(np.float64)
    if dtype == "float16":  # wide: float16 is a small float, handled above
        raise AssertionError("unreachable")
    return x.astype(np.float64)


def _aligned(x: np.ndarray) -> np.ndarray:
    """``x`` itself when aligned and writable (the kernels' compiled signature), else a copy
    (unpadded files put elements at any byte)."""
    if x.flags.aligned and x.flags.writeable:
        return x
    return x.copy()
