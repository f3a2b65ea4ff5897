"""The source text of the compiled pair kernels, written from the figure layout's ``PARTIALS``.

:mod:`.generated_module` writes it once to a cache folder and loads it (numba's ``cache=True``
needs a real source file); nothing else is ever executed from there. The text is a pure
function of the layout, so a layout change is a new text and a new cache entry: no kernel
file can disagree with the layout.
"""

from __future__ import annotations

from collections.abc import Sequence

from .figure_layout import BOOKKEEPING, FUSED_PARTIALS, OWN_PARTIALS, Partial

# the module's name: in this package, so the kernels import the element helpers relatively
MODULE = f"{__package__}._numba_pair"


def _add(p: Partial, acc: str) -> str:
    if p.merge == "count":
        return f"{acc} += 1 if {p.term} else 0"
    return f"{acc} += {p.term}"


def _loop(maxes: list[Partial], sums: list[Partial], v: dict[str, str]) -> str:
    """One vectorised loop of the fast block over ``maxes`` and ``sums``."""
    body = [f"        {v[p.name]} = _fmax({v[p.name]}, {p.term})" for p in maxes]
    body += [f"        {_add(p, v[p.name])}" for p in sums]
    head = [
        "    for i in range(a.size):",
        "        x = _f64(a[i])",
        "        y = _f64(b[i])",
        "        d = y - x",
        "        ad = abs(d)",
    ]
    return "\n".join(head + body)


def source(fused: Sequence[Partial] = FUSED_PARTIALS, own: Sequence[Partial] = OWN_PARTIALS) -> str:
    """The kernels' module: ``pair_fast`` and ``pair_careful`` over the partials ``fused``
    then ``own`` (slot order); the fast block sums ``fused`` in one loop and each of ``own``
    in a loop of its own, so that the fused loop's code (and its rounding) is the same
    whatever ``own`` holds."""
    parts = [*fused, *own]
    slot = {p.name: i for i, p in enumerate(parts)}

    def kernel_max(p: Partial) -> bool:
        return p.term is not None and p.merge == "max"

    def kernel_sum(p: Partial) -> bool:
        return p.term is not None and p.merge != "max"

    maxes = [p for p in parts if kernel_max(p)]
    sums = [p for p in parts if kernel_sum(p)]
    v = {p.name: f"v_{p.name}" for p in parts}
    m = ", ".join(v[p.name] for p in maxes)

    def zero(p: Partial) -> str:
        return "0" if p.merge == "count" else "0.0"

    init = "\n".join(f"    {v[p.name]} = {zero(p)}" for p in sums)
    loops = [_loop([p for p in fused if kernel_max(p)], [p for p in fused if kernel_sum(p)], v)]
    loops += [_loop([p] if kernel_max(p) else [], [p] if kernel_sum(p) else [], v) for p in own]
    body_fast = "\n".join(loops)
    body_careful = "\n".join(
        [f"            {v[p.name]} = max({v[p.name]}, {p.term})" for p in maxes]
        + [f"            {_add(p, v[p.name])}" for p in sums]
    )
    mismatches = "\n".join(f"            {v[p.name]} += 1" for p in sums if p.mismatch)
    mismatches = mismatches or "            pass"
    outs = ", ".join(v[p.name] for p in maxes + sums)
    fast_total = "\n".join(f"    t_{p.name} = {zero(p)}" for p in sums)
    fast_add = "\n".join(
        [f"        {v[p.name]} = r[{i}]" for i, p in enumerate(maxes)]
        + [f"        t_{p.name} += r[{len(maxes) + i}]" for i, p in enumerate(sums)]
    )
    fast_store = "\n".join(
        [f"    out[{slot[p.name]}] = {v[p.name]}" for p in maxes]
        + [f"    out[{slot[p.name]}] = t_{p.name}" for p in sums]
    )
    careful_load = "\n".join(f"    {v[p.name]} = out[{slot[p.name]}]" for p in maxes)
    careful_store = "\n".join(
        [f"    out[{slot[p.name]}] = {v[p.name]}" for p in maxes]
        + [f"    out[{slot[p.name]}] += {v[p.name]}" for p in sums]
    )
    b = {k: slot[k] for k in BOOKKEEPING}
    fast_slots = ", ".join(str(slot[p.name]) for p in maxes + sums)
    return f'''"""The compiled pair kernels, written by ckpt_explorer/diff/pair_source.py from the figure
layout (diff/figure_layout.py): a cache entry, never edited.

``pair_fast`` assumes finite values (a NaN/Inf shows up as a non-finite sum, and the caller
reruns ``pair_careful``, which counts them and sums the finite pairs). Sums run in vector lanes
within blocks of ``BLOCK`` elements and blocks add up in order. Each partial's lines stand
twice on purpose (in the fast and the careful block): flat loops for numba to compile; the fast
block has one fused loop and one loop per figure's own partial.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from ._numba_kernels import _FAST, BLOCK, _f64, _fmax

SLOTS = {len(parts)}


@njit(nogil=True, cache=True, fastmath=_FAST, inline="never")
def _pair_block(a: Any, b: Any, atol: float, rtol: float, {m}: float) -> Any:
{init}
{body_fast}
    return {outs}


@njit(nogil=True, cache=True)
def pair_fast(a: Any, b: Any, atol: float, rtol: float, out: Any) -> None:
    """Slots {fast_slots} of the pair partials, assuming every value finite."""
    {m} = 0.0
{fast_total}
    n = a.size
    for start in range(0, n, BLOCK):
        stop = min(n, start + BLOCK)
        r = _pair_block(a[start:stop], b[start:stop], atol, rtol, {m})
{fast_add}
{fast_store}


@njit(nogil=True, cache=True, inline="never")
def _pair_careful_block(a: Any, b: Any, atol: float, rtol: float, out: Any) -> None:
{careful_load}
{init}
    nan_a = nan_b = inf_a = inf_b = n = 0
    for i in range(a.size):
        x = _f64(a[i])
        y = _f64(b[i])
        fx, fy = np.isfinite(x), np.isfinite(y)
        if np.isnan(x):
            nan_a += 1
        elif not fx:
            inf_a += 1
        if np.isnan(y):
            nan_b += 1
        elif not fy:
            inf_b += 1
        if fx and fy:
            d = y - x
            ad = abs(d)
{body_careful}
            n += 1
        elif not (x == y or (np.isnan(x) and np.isnan(y))):
{mismatches}
{careful_store}
    out[{b["nan_a"]}] += nan_a
    out[{b["nan_b"]}] += nan_b
    out[{b["inf_a"]}] += inf_a
    out[{b["inf_b"]}] += inf_b
    out[{b["count"]}] += n


@njit(nogil=True, cache=True)
def pair_careful(a: Any, b: Any, atol: float, rtol: float, out: Any) -> None:
    """All {len(parts)} pair partials (``out`` zeroed): NaN/Inf counted, finite pairs summed."""
    n = a.size
    for start in range(0, n, BLOCK):
        stop = min(n, start + BLOCK)
        _pair_careful_block(a[start:stop], b[start:stop], atol, rtol, out)
'''
