"""The few tensor values listing reads, from the file's bytes: no torch needed.

``validate --no-numeric`` reads an optimizer's ``step`` scalars and compares a model's tied
embedding with its head. Where a record's loader is a :class:`~.mapped.MappedTensor` over a
dense little-endian block, these are read here (``struct`` for a scalar, numpy for an equality
with ``torch.equal``'s meaning); otherwise the functions answer None and the caller loads the
tensor through torch.
"""

from __future__ import annotations

import struct
from typing import Any

from ..types import TensorRecord
from .mapped import MappedTensor

_STRUCT = {
    "float64": "<d",
    "float32": "<f",
    "float16": "<e",
    "int8": "<b",
    "uint8": "<B",
    "int16": "<h",
    "uint16": "<H",
    "int32": "<i",
    "uint32": "<I",
    "int64": "<q",
    "uint64": "<Q",
    "bool": "<?",
}
# numpy dtype of each element (bfloat16: its 16 bits, widened to float32 before comparing)
_NUMPY = {**{k: v[1:] for k, v in _STRUCT.items()}, "bfloat16": "H"}
CHUNK_ELEMENTS = 1 << 22
PEEK = 4096  # bytes compared in Python before numpy is imported
_FLOATS = ("float64", "float32", "float16", "bfloat16")
_ITEMSIZE = {k: struct.calcsize(v) for k, v in _STRUCT.items() if k != "bool"} | {"bfloat16": 2}


def _dense(record: TensorRecord) -> memoryview | None:
    loader = record.read_values
    return loader.dense_bytes() if isinstance(loader, MappedTensor) else None


def record_scalar(record: TensorRecord) -> float | None:
    """The value of a one-element record, or None when it cannot be read here."""
    if record.numel != 1:
        return None
    raw = _dense(record)
    if raw is None:
        return None
    if record.dtype == "bfloat16":
        return float(struct.unpack("<f", b"\0\0" + bytes(raw))[0])
    fmt = _STRUCT.get(record.dtype)
    return None if fmt is None else float(struct.unpack(fmt, raw)[0])


def records_equal(a: TensorRecord, b: TensorRecord) -> bool | None:
    """``torch.equal`` of two records of one dtype and shape (NaN never equal, -0.0 == 0.0),
    or None when it cannot be decided here."""
    if a.dtype != b.dtype or a.shape != b.shape or a.dtype not in _NUMPY:
        return None
    raw_a, raw_b = _dense(a), _dense(b)
    if raw_a is None or raw_b is None:
        return None
    if _differ_early(a.dtype, raw_a, raw_b):
        return False  # (the common answer for an untied head, without importing numpy)
    import numpy as np

    kind = np.dtype(_NUMPY[a.dtype]).newbyteorder("<")
    xs, ys = np.frombuffer(raw_a, dtype=kind), np.frombuffer(raw_b, dtype=kind)
    for start in range(0, max(len(xs), 1), CHUNK_ELEMENTS):
        x, y = _widen(
            a.dtype, xs[start : start + CHUNK_ELEMENTS], ys[start : start + CHUNK_ELEMENTS]
        )
        if not np.array_equal(x, y):
            return False
    return True


def _differ_early(dtype: str, raw_a: memoryview, raw_b: memoryview) -> bool:
    """Whether the first :data:`PEEK` bytes already hold a pair of elements that
    ``torch.equal`` calls different: bytes that differ, unless both are zeros (of either
    sign: -0.0 == 0.0). Other non-NaN floats are equal only bit for bit, a NaN equals
    nothing, integers are their bits. False: undecided here."""
    size = _ITEMSIZE.get(dtype)
    if size is None:
        return False
    x, y = bytes(raw_a[:PEEK]), bytes(raw_b[:PEEK])
    if x == y:
        return False
    signed_zero = dtype in _FLOATS
    for i in range(0, min(len(x), len(y)) - size + 1, size):
        ex, ey = x[i : i + size], y[i : i + size]
        if ex != ey and not (signed_zero and _zero(ex) and _zero(ey)):
            return True
    return False


def _zero(element: bytes) -> bool:
    """+0.0 or -0.0 (little-endian: every bit but the last byte's top one is clear)."""
    return not element[:-1].strip(b"\0") and not element[-1] & 0x7F


def _widen(dtype: str, x: Any, y: Any) -> tuple[Any, Any]:
    if dtype != "bfloat16":
        return x, y
    import numpy as np

    return tuple((v.astype(np.uint32) << 16).view(np.float32) for v in (x, y))  # type: ignore[return-value]
