"""Fused float64 reductions over one chunk: every figure in one pass, in registers.

Compiled with numba, a core dependency where numba has wheels (elsewhere
``pip install ckpt-explorer[fast]`` asks for it); :func:`have_numba` says whether it loaded
(importing numba on first call, never at import) and callers fall back to torch ops otherwise.
The compiled kernels are cached on disk (``cache=True``), so only a machine's first diff
compiles them; the pair kernels' source is generated from the figure layout and written once
to a cache folder (:mod:`.generated_module`).

The kernels read a chunk where it lies (mmapped bytes, no copy): bfloat16 and float16 as
their 16-bit patterns, widened per element to float64 (exact), float32/float64 as they are;
other dtypes are widened by torch first (float8 to float32, exact; the rest to float64).
Every difference, product and sum is float64, so ``b - a`` and max |b - a| are the bits
numpy's float64 gives. Sums run in vector lanes within blocks of 4096 elements and blocks add
up in order (LLVM may reassociate, nothing else is relaxed): a chunk's sums are a fixed
function of the chunk, the same bits on every call, thread and process. A chunk holding NaN
or Inf is redone by a scalar kernel that counts them and sums the finite values. The kernels
release the GIL, so threads over fixed chunks use every core.
"""

from __future__ import annotations

import math
import os
import threading
from typing import TYPE_CHECKING, Any

from .figure_layout import PARTIALS, SLOT

if TYPE_CHECKING:
    import numpy as np
    import torch

# slots of a pair's partials: the figure layout's PARTIALS, in order
PAIR_SLOTS = len(PARTIALS)
# slots of one tensor's partials: count of finite, min, max, Σx, Σx², Σ|x|, zeros, NaN, Inf
VALUE_NAMES = ("finite", "min", "max", "sum", "sq", "abs", "zeros", "nan", "inf")
VALUE_SLOTS = len(VALUE_NAMES)
_FINITE_CHECK = (SLOT["aa"], SLOT["bb"], SLOT["dd"])  # non-finite when a value is

_nk: Any = None
_pk: Any = None
_loaded = False
_lock = threading.Lock()


def have_numba() -> bool:
    """Whether the compiled kernels are usable: on the first call, import numba and run each
    kernel once (numba loads its registries then, ~1 s); any failure means torch ops. The
    environment variable ``CKPT_EXPLORER_KERNEL=torch`` turns them off (to compare paths)."""
    global _nk, _pk, _loaded
    with _lock:
        if not _loaded:
            if os.environ.get("CKPT_EXPLORER_KERNEL", "").lower() != "torch":
                _nk, _pk = _load()
            _loaded = True
    return _nk is not None


def _load() -> tuple[Any, Any]:
    """The value kernels and the pair kernels (None, None: torch ops)."""
    import numpy as np

    try:
        from . import _numba_kernels as nk
        from .generated_module import load
        from .pair_source import MODULE, source

        pk = load(MODULE, source())  # generated from the figure layout, cached on disk
        x = np.zeros(8, dtype=np.uint16)
        pk.pair_fast(x, x, 0.0, 0.0, np.zeros(PAIR_SLOTS))
        nk.value_fast(x, np.zeros(VALUE_SLOTS))
    except Exception:  # numba missing, or it cannot compile or cache here: torch ops
        return None, None
    return nk, pk


def _array(t: torch.Tensor, wide: bool) -> np.ndarray:
    """A numpy view of a contiguous CPU chunk in a dtype the kernels read (a copy if none)."""
    import torch

    t = t.detach().cpu()
    if not wide:
        if t.dtype == torch.bfloat16:
            return t.view(torch.uint16).numpy()
        if t.dtype == torch.float16:
            return t.view(torch.int16).numpy()
        if t.dtype in (torch.float32, torch.float64):
            return t.numpy()
    if t.is_floating_point() and t.element_size() <= 2:
        return t.to(torch.float32).numpy()  # fp8 and other small floats: exact in float32
    return t.to(torch.float64).numpy()


def _pair_arrays(a: torch.Tensor, b: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    same = a.dtype == b.dtype
    return _array(a, not same), _array(b, not same)


def pair_partials(a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float) -> list[float]:
    """The partials of one chunk pair, in the order of the layout's ``PARTIALS`` (d = b - a,
    float64; over positions finite on both sides)."""
    x, y = _pair_arrays(a.reshape(-1), b.reshape(-1))
    return _pair(x, y, atol, rtol)


def raw_pair_partials(
    x: np.ndarray, y: np.ndarray, dtypes: tuple[str, str], atol: float, rtol: float
) -> list[float]:
    """:func:`pair_partials` of two chunks of :func:`.raw_arrays.raw_view` (no torch)."""
    from .raw_arrays import element_kind, kernel_array

    wide = element_kind(dtypes[0]) != element_kind(dtypes[1])
    return _pair(kernel_array(x, dtypes[0], wide), kernel_array(y, dtypes[1], wide), atol, rtol)


def _pair(x: np.ndarray, y: np.ndarray, atol: float, rtol: float) -> list[float]:
    import numpy as np

    assert _pk is not None
    out = np.zeros(PAIR_SLOTS, dtype=np.float64)
    _pk.pair_fast(x, y, float(atol), float(rtol), out)
    if not math.isfinite(sum(out[i] for i in _FINITE_CHECK)):
        out[:] = 0.0
        _pk.pair_careful(x, y, float(atol), float(rtol), out)
    else:
        out[SLOT["count"]] = x.size
    return out.tolist()  # type: ignore[no-any-return]


def value_partials(t: torch.Tensor) -> list[float]:
    """``[finite count, min, max, Σx, Σx², Σ|x|, zeros, NaN, Inf]`` of one chunk (float64;
    min/max/sums over finite values, min = +inf and max = -inf when none is finite)."""
    return _values(_array(t.reshape(-1), False))


def raw_value_partials(x: np.ndarray, dtype: str) -> list[float]:
    """:func:`value_partials` of a chunk of :func:`.raw_arrays.raw_view` (no torch)."""
    from .raw_arrays import kernel_array

    return _values(kernel_array(x, dtype, False))


def _values(x: np.ndarray) -> list[float]:
    import numpy as np

    assert _nk is not None
    out = np.zeros(VALUE_SLOTS, dtype=np.float64)
    _nk.value_fast(x, out)
    if not math.isfinite(out[1] + out[2] + out[4]) and x.size:
        out[:] = 0.0
        _nk.value_careful(x, out)
    else:
        out[0] = x.size
    return out.tolist()  # type: ignore[no-any-return]


def identical_partials(a: torch.Tensor) -> list[float]:
    """Pair partials of a chunk whose two sides hold the same bytes (only ‖a‖² and counts)."""
    return _identical(value_partials(a))


def raw_identical_partials(x: np.ndarray, dtype: str) -> list[float]:
    """:func:`identical_partials` of a chunk of :func:`.raw_arrays.raw_view` (no torch)."""
    return _identical(raw_value_partials(x, dtype))


_VALUE_INDEX = {name: i for i, name in enumerate(VALUE_NAMES)}
_IDENTICAL = [None if p.identical is None else _VALUE_INDEX[p.identical] for p in PARTIALS]


def _identical(v: list[float]) -> list[float]:
    """Pair partials from one side's value partials (each partial's ``identical`` source)."""
    return [0.0 if i is None else v[i] for i in _IDENTICAL]


def merge_values(parts: list[list[float]]) -> dict[str, Any]:
    """Chunk partials of :func:`value_partials`, merged in their order."""
    finite = 0
    lo, hi = math.inf, -math.inf
    s = ss = sa = 0.0
    zeros = nan = inf = 0
    for v in parts:
        finite += round(v[0])
        lo, hi = min(lo, v[1]), max(hi, v[2])
        s, ss, sa = s + v[3], ss + v[4], sa + v[5]
        zeros, nan, inf = zeros + round(v[6]), nan + round(v[7]), inf + round(v[8])
    return {
        "finite": finite,
        "min": lo,
        "max": hi,
        "sum": s,
        "sq": ss,
        "abs": sa,
        "zeros": zeros,
        "nan": nan,
        "inf": inf,
    }


def warm_up() -> bool:
    """Load the compiled kernels now rather than on first use; returns :func:`have_numba`."""
    return have_numba()
