"""The compiled loops behind :mod:`ckpt_explorer.diff.kernel` (imports numba; optional): the
value kernels and the element helpers; the pair kernels are generated from the figure layout
(:mod:`.pair_source`) and import these helpers.

Arrays come as uint16 (bfloat16 bit patterns), int16 (float16 bit patterns), float32 or
float64; ``_f64`` widens one element to float64 exactly. ``*_fast`` assume finite values
(a NaN/Inf shows up as a non-finite sum, and the caller reruns ``*_careful``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

# reassoc lets LLVM split the float64 sums into vector lanes; nothing else is relaxed
_FAST = {"reassoc"}
# elements per block: sums run in vector lanes inside a block, blocks add up in order, so
# the rounding stays close to numpy's pairwise sums
BLOCK = 4096


def _call(builder: Any, name: str, args: list[Any]) -> Any:
    d = ir.DoubleType()
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(d, [d, d]), name)
    # no NaN reaches a fast kernel's min/max (a chunk with one is redone by a careful one)
    return builder.call(fn, args, fastmath=("nnan", "nsz"))


def _fmax_typer(typingctx: Any, x: Any, y: Any) -> Any:
    """llvm.maxnum (vectorisable, unlike a compare-and-select); operands are never NaN."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return _call(builder, "llvm.maxnum.f64", list(args))

    return types.float64(types.float64, types.float64), codegen


_fmax: Any = intrinsic(_fmax_typer)  # typed as Any: numba's stub wants typingctx


def _fmin_typer(typingctx: Any, x: Any, y: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return _call(builder, "llvm.minnum.f64", list(args))

    return types.float64(types.float64, types.float64), codegen


_fmin: Any = intrinsic(_fmin_typer)  # typed as Any: numba's stub wants typingctx


def _bf16_typer(typingctx: Any, bits: Any) -> Any:
    """A bfloat16 bit pattern (uint16) as float64: the high half of a float32, widened."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        wide = builder.shl(builder.zext(args[0], ir.IntType(32)), ir.Constant(ir.IntType(32), 16))
        return builder.fpext(builder.bitcast(wide, ir.FloatType()), ir.DoubleType())

    return types.float64(types.uint16), codegen


_bf16: Any = intrinsic(_bf16_typer)  # typed as Any: numba's stub wants typingctx


def _f16_typer(typingctx: Any, bits: Any) -> Any:
    """A float16 bit pattern (int16) as float64."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.DoubleType())

    return types.float64(types.int16), codegen


_f16: Any = intrinsic(_f16_typer)  # typed as Any: numba's stub wants typingctx


def _f64(v: Any) -> float:  # pragma: no cover - replaced by the overload inside kernels
    raise NotImplementedError


@overload(_f64, inline="always")
def _f64_impl(v: Any) -> Any:
    # the implementations repeat the stub's parameter (annotation included), as numba checks
    def bf16(v: Any) -> float:
        return _bf16(v)  # type: ignore[no-any-return]

    def f16(v: Any) -> float:
        return _f16(v)  # type: ignore[no-any-return]

    def wide(v: Any) -> float:
        return np.float64(v)  # type: ignore[no-any-return]

    if v == types.uint16:
        return bf16
    if v == types.int16:
        return f16
    if isinstance(v, types.Float):
        return wide
    return None


@njit(nogil=True, cache=True, fastmath=_FAST, inline="never")
def _value_block(a: Any, lo: float, hi: float) -> Any:
    s1 = s2 = s3 = 0.0
    zeros = 0
    for i in range(a.size):
        x = _f64(a[i])
        lo = _fmin(lo, x)
        hi = _fmax(hi, x)
        s1 += x
        s2 += x * x
        s3 += abs(x)
        zeros += 1 if x == 0.0 else 0
    return lo, hi, s1, s2, s3, zeros


@njit(nogil=True, cache=True)
def value_fast(a: Any, out: Any) -> None:
    """Slots 1-6 of the value partials, assuming every value finite."""
    lo, hi = np.inf, -np.inf
    s = ss = sa = 0.0
    zeros = 0
    n = a.size
    for start in range(0, n, BLOCK):
        lo, hi, s1, s2, s3, z = _value_block(a[start : min(n, start + BLOCK)], lo, hi)
        s += s1
        ss += s2
        sa += s3
        zeros += z
    out[1], out[2], out[3], out[4], out[5], out[6] = lo, hi, s, ss, sa, zeros


# _value_block's sums again, on purpose: each kernel stays one flat loop for numba (as pair_*).
@njit(nogil=True, cache=True, inline="never")
def _value_careful_block(a: Any, out: Any) -> None:
    lo, hi = out[1], out[2]
    s1 = s2 = s3 = 0.0
    finite = zeros = nan = inf = 0
    for i in range(a.size):
        x = _f64(a[i])
        if np.isnan(x):
            nan += 1
        elif np.isinf(x):
            inf += 1
        else:
            finite += 1
            lo = min(lo, x)
            hi = max(hi, x)
            s1 += x
            s2 += x * x
            s3 += abs(x)
            zeros += 1 if x == 0.0 else 0
    out[0] += finite
    out[1], out[2] = lo, hi
    out[3] += s1
    out[4] += s2
    out[5] += s3
    out[6] += zeros
    out[7] += nan
    out[8] += inf


@njit(nogil=True, cache=True)
def value_careful(a: Any, out: Any) -> None:
    """All 9 value partials (``out`` zeroed): NaN/Inf counted, finite values summed."""
    out[1], out[2] = np.inf, -np.inf
    n = a.size
    for start in range(0, n, BLOCK):
        _value_careful_block(a[start : min(n, start + BLOCK)], out)
