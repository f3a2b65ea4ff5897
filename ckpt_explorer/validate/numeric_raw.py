"""Numeric health of a small checkpoint with numpy alone: no torch, no compiled kernels.

Importing torch and loading numba's kernels costs a few CPU seconds, more than streaming a
small model through numpy. For a scan of at most :data:`SMALL_SCAN_BYTES`, each tensor whose
bytes are one dense block of a mapped file (safetensors, torch pickles) is read as its raw
elements (:func:`~ckpt_explorer.diff.raw_arrays.raw_view`) and widened exactly to float32 or
float64; NaN and Inf are counted and min/max taken over the finite values, the figures the
kernel path gives (a zero's sign aside: both give +0.0 here). Anything else answers None and
goes through torch.
"""

from __future__ import annotations

from typing import Any

from ..io.mapped import MappedTensor
from ..types import TensorRecord

SMALL_SCAN_BYTES = 256 << 20
# dtypes read here: the floats the kernels read, as numpy widens them exactly
_FLOATS = ("bfloat16", "float16", "float32", "float64")
_FP8 = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")


def readable(record: TensorRecord) -> bool:
    """Whether :func:`raw_figures` can read ``record`` (dtype and loader; bytes not read)."""
    return (record.dtype in _FLOATS or record.dtype in _FP8) and isinstance(
        record.read_values, MappedTensor
    )


def raw_figures(
    record: TensorRecord, chunk_elements: int
) -> tuple[int, float | None, float | None, int, int] | None:
    """``(numel, min, max, NaN count, Inf count)`` of ``record``'s values (min/max over the
    finite ones, None when none is), or None when its bytes are not one dense block.

    Raises:
        TruncatedFileError: the file is shorter than the tensor's bytes.
    """
    import numpy as np

    from ..diff.raw_arrays import fp8_table, raw_view

    loader = record.read_values
    if not readable(record) or not isinstance(loader, MappedTensor):
        return None
    data = loader.dense_bytes()
    if data is None:
        return None
    raw = raw_view(data, record.dtype)
    lo, hi = np.inf, -np.inf
    nan = inf = 0
    step = max(1, chunk_elements)
    for start in range(0, raw.size, step):
        x = _widen(raw[start : start + step], record.dtype, np, fp8_table)
        bad = ~np.isfinite(x)
        if bad.any():
            n_nan = int(np.isnan(x).sum())
            nan, inf = nan + n_nan, inf + int(bad.sum()) - n_nan
            x = x[~bad]
        if x.size:
            lo, hi = min(lo, float(x.min())), max(hi, float(x.max()))
    found = lo != np.inf
    return raw.size, lo + 0.0 if found else None, hi + 0.0 if found else None, nan, inf


def _widen(x: Any, dtype: str, np: Any, fp8_table: Any) -> Any:
    """Raw elements as float32/float64 values (exact)."""
    if dtype == "bfloat16":
        return (x.astype(np.uint32) << 16).view(np.float32)
    if dtype == "float16":
        return x.view(np.float16).astype(np.float32)
    if dtype in _FP8:
        return fp8_table(dtype)[x]
    return x
