"""A momentum buffer restored on resume, or a fresh one? Told by its size.

SGD with momentum and Muon keep no step counter: the only trace of a restart is the buffer
itself. A buffer ``b = mu * b + g`` that has taken ``n`` steps from zero holds about
``(1 - mu**n) / (1 - mu)`` gradients' worth. From A (``n`` steps into the run) to B, ``k``
steps later, a restored buffer therefore grows by about ``(1 - mu**(n + k)) / (1 - mu**n)``
and a fresh one started at the resume is ``(1 - mu**k) / (1 - mu**n)`` of A's. The median of
B's buffer norms over A's says which of the two it is, when the two expectations are far enough
apart to tell; gradients change size over a run (they shrink as it converges), so B must be
clearly nearer the fresh size, and near it.
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .evidence import Side

SAMPLE = 1 << 16  # elements of each buffer whose norm is compared
APART = 1.8  # the restored and fresh expectations must differ at least this much
CLEARLY = 1.3  # B's size must be this much nearer (as a ratio) to a fresh buffer's
NEAR = 1.15  # ... and within this ratio of it: gradients shrink as a run converges, so a
# restored buffer far below the fresh size says the gradients changed, not the buffer


def _norm(side: Side, pid: int) -> float | None:
    assert side.opt is not None
    record = side.opt.states.get(pid, {}).get("momentum_buffer")
    if record is None or not record.numel:
        return None
    try:
        import torch

        t = side.opt.view.load(record.name).reshape(-1)[:SAMPLE].to(torch.float64)
        return float(t.norm())
    except Exception:
        return None


def _momentum(groups: list[dict[str, Any]]) -> float | None:
    values = {g.get("momentum") for g in groups}
    mu = values.pop() if len(values) == 1 else None
    return float(mu) if isinstance(mu, int | float) and 0 < mu < 1 else None


def fresh_momentum(a: Side, b: Side) -> tuple[float, str] | None:
    """(score, evidence) when B's momentum buffers are the size of fresh ones; None when they
    are not, or when the two cases cannot be told apart."""
    if a.opt is None or b.opt is None or a.opt_step is not None or b.opt_step is not None:
        return None
    if a.position is None or b.position is None or b.position <= a.position or a.position < 1:
        return None
    mu = _momentum(b.opt.groups)
    if mu is None:
        return None
    n, k = a.position, b.position - a.position
    ratios = []
    for pid in sorted(set(a.opt.states) & set(b.opt.states)):
        na, nb = _norm(a, pid), _norm(b, pid)
        if na and nb is not None:
            ratios.append(nb / na)
    if len(ratios) < 2:
        return None
    restored = (1 - mu ** (n + k)) / (1 - mu**n)
    fresh = (1 - mu**k) / (1 - mu**n)
    if restored / fresh < APART:
        return None
    observed = statistics.median(ratios)
    to_fresh, to_restored = abs(math.log(observed / fresh)), abs(math.log(observed / restored))
    if to_restored - to_fresh < math.log(CLEARLY) or to_fresh > math.log(NEAR):
        return None
    return (
        0.88,
        f"B's momentum buffers are {observed:.2f}× A's in norm (median of {len(ratios)}): "
        f"with momentum {mu:g}, a buffer restored at the resume would be about {restored:.2f}× "
        f"after {k} more steps, one started afresh about {fresh:.2f}×: the optimizer started "
        "from scratch",
    )
