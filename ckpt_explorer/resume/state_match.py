"""Did each parameter move the way its own optimizer state says?

Adam updates a parameter along ``-exp_avg / sqrt(exp_avg_sq)`` of *its* state. Between a
state A and a state B saved after resuming from it, the weight change of parameter p therefore
correlates, element by element, with the update direction of p's optimizer id in B. When the
optimizer was rebuilt with its parameters in another order and A's state loaded into it, p was
moved by another id's state: its weight change correlates with that id's direction instead.
When the parameters swapped have the same shape nothing in the shapes shows it; this does.
Only a sample of each tensor (its first elements) is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..validate.parts import ModelPart, OptimizerPart

if TYPE_CHECKING:
    import torch

SAMPLE = 2048
FOLLOWS = 0.5  # correlation of a weight change with the direction that produced it
MARGIN = 0.15  # another id's direction must fit this much better than its own id's
MAX_CLASS = 256  # ids of one shape compared pairwise at most


@dataclass(frozen=True)
class Misrouted:
    """Parameter ``name`` (id ``pid`` by the model's order) moved along id ``source``'s state."""

    pid: int
    name: str
    source: int
    with_own: float
    with_source: float


def _unit(x: torch.Tensor) -> torch.Tensor | None:
    import torch

    x = x.reshape(-1)[:SAMPLE].to(torch.float64)
    if x.numel() < 8 or not bool(torch.isfinite(x).all()):
        return None
    x = x - x.mean()
    norm = float(x.norm())
    return x / norm if norm > 0 else None


def _direction(opt: OptimizerPart, pid: int) -> torch.Tensor | None:
    states = opt.states.get(pid, {})
    m, v = states.get("exp_avg"), states.get("exp_avg_sq")
    if m is None or v is None or m.numel < 8:
        return None
    try:
        return _unit(-opt.view.load(m.name) / (opt.view.load(v.name).sqrt() + 1e-12))
    except Exception:
        return None


def _change(a: ModelPart, b: ModelPart, name: str) -> torch.Tensor | None:
    ra = next((r for r in a.records if r.name == name), None)
    rb = next((r for r in b.records if r.name == name), None)
    if ra is None or rb is None or ra.shape != rb.shape:
        return None
    try:
        import torch

        wa = a.view.load(ra.name).reshape(-1)[:SAMPLE].to(torch.float64)
        wb = b.view.load(rb.name).reshape(-1)[:SAMPLE].to(torch.float64)
    except Exception:
        return None
    return _unit(wb - wa)


def misrouted_updates(a: ModelPart, b: ModelPart, opt: OptimizerPart) -> list[Misrouted]:
    """Parameters whose change from A to B follows another id's Adam direction in B."""
    import torch

    names = opt.param_names
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for pid in names:
        shape = opt.state_shape(pid)
        if shape is not None:
            by_shape.setdefault(shape, []).append(pid)
    out: list[Misrouted] = []
    for ids in by_shape.values():
        if len(ids) < 2 or len(ids) > MAX_CLASS:
            continue
        rows = [(pid, _change(a, b, names[pid]), _direction(opt, pid)) for pid in ids]
        kept = [(p, c, d) for p, c, d in rows if c is not None and d is not None]
        if len(kept) < 2 or len({c.numel() for _, c, _ in kept}) != 1:
            continue
        changes = torch.stack([c for _, c, _ in kept])  # type: ignore[misc]
        directions = torch.stack([d for _, _, d in kept])  # type: ignore[misc]
        corr = changes @ directions.T  # row k: parameter k's change against every direction
        for k, (pid, _, _) in enumerate(kept):
            best = int(torch.argmax(corr[k]))
            own, top = float(corr[k, k]), float(corr[k, best])
            if best != k and top >= FOLLOWS and top - own >= MARGIN:
                out.append(Misrouted(pid, names[pid], kept[best][0], own, top))
    return out
