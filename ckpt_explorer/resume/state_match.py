"""Did each parameter move the way its own optimizer state says?

Between a state A and a state B saved after resuming from it, each parameter moved the way the
optimizer id that drove it says: along ``-exp_avg / sqrt(exp_avg_sq)`` (Adam and its kin),
``-momentum_buffer`` (SGD with momentum, Muon, RMSprop with momentum), towards ``z``
(schedule-free), bitsandbytes' 8-bit Adam states dequantized. Optimizers that keep no direction keep a running sum of squared gradients
(Adagrad's ``sum``, RMSprop's ``square_avg``, Adafactor's factored ``row_var`` / ``col_var``):
what that sum gained from A to B follows the squared weight change of the parameter it drove.
When the optimizer was rebuilt with its parameters in another order and A's state loaded into
it, parameter p was driven by another id's state, and its change fits that id instead of its
own. When the parameters swapped have the same shape nothing in the shapes shows it; this does.
Only a sample of each tensor (its first elements) is compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..validate.parts import ModelPart, OptimizerPart

if TYPE_CHECKING:
    import torch

SAMPLE = 2048
FOLLOWS = 0.5  # correlation of a weight change with the state that produced it
MARGIN = 0.15  # another id's state must fit this much better than its own id's
MAX_CLASS = 256  # ids of one shape compared pairwise at most
SECOND_MOMENTS = ("sum", "square_avg", "exp_avg_sq", "variance")


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


MAX_FACTORED = 1 << 22  # a factored state is compared whole up to this many elements


def _load(opt: OptimizerPart, pid: int, state: str, whole: bool = False) -> torch.Tensor | None:
    """The state's first :data:`SAMPLE` elements (``whole``: all of it), as float64."""
    record = opt.states.get(pid, {}).get(state)
    if record is None or record.numel < 8:
        return None
    try:
        import torch

        t = opt.view.load(record.name)
        return (t if whole else t.reshape(-1)[:SAMPLE]).to(torch.float64)
    except Exception:
        return None


def _direction(opt: OptimizerPart, pid: int, weight: torch.Tensor) -> torch.Tensor | None:
    """The direction id ``pid`` moves its parameter in (None: its states keep none)."""
    m, v = _load(opt, pid, "exp_avg"), _load(opt, pid, "exp_avg_sq")
    if m is not None and v is not None and m.shape == v.shape:
        return _unit(-m / (v.sqrt() + 1e-12))
    buf = _load(opt, pid, "momentum_buffer")
    if buf is not None:
        return _unit(-buf)
    z = _load(opt, pid, "z")
    if z is not None and z.shape == weight.shape:
        return _unit(z - weight)
    m, v = _dequantized(opt, pid, "1"), _dequantized(opt, pid, "2")
    if m is not None and v is not None and m.shape == v.shape:
        return _unit(-m / (v.clamp(min=0).sqrt() + 1e-12))
    return None


BNB = "__bnb_optimizer_quant_state__."


def _dequantized(opt: OptimizerPart, pid: int, which: str) -> torch.Tensor | None:
    """bitsandbytes' 8-bit blockwise state ``state<which>``: ``qmap[code] * absmax[block]``."""
    codes = opt.states.get(pid, {}).get(f"{BNB}state{which}")
    if codes is None or codes.dtype != "uint8" or codes.numel < 8:
        return None
    states = opt.states[pid]
    qrec, arec = states.get(f"{BNB}qmap{which}"), states.get(f"{BNB}absmax{which}")
    if qrec is None or arec is None or qrec.numel != 256 or not arec.numel:
        return None
    try:
        import torch

        qmap = opt.view.load(qrec.name).reshape(-1).to(torch.float64)
        absmax = opt.view.load(arec.name).reshape(-1).to(torch.float64)
        flat = opt.view.load(codes.name).reshape(-1)[:SAMPLE].to(torch.int64)
        blocks = max(1, -(-codes.numel // arec.numel))  # elements per absmax block
        index = (torch.arange(flat.numel()) // blocks).clamp(max=absmax.numel() - 1)
        return qmap[flat] * absmax[index]
    except Exception:
        return None


def _gained(a: OptimizerPart, b: OptimizerPart, pid: int) -> torch.Tensor | None:
    """What id ``pid``'s squared-gradient sum gained from A to B (factored sums: rows, then
    columns)."""
    import torch

    for state in SECOND_MOMENTS:
        va, vb = _load(a, pid, state), _load(b, pid, state)
        if va is not None and vb is not None and va.shape == vb.shape:
            return _unit(vb - va)
    parts = []
    for state in ("row_var", "col_var"):
        va, vb = _load(a, pid, state, whole=True), _load(b, pid, state, whole=True)
        if va is None or vb is None or va.shape != vb.shape:
            return None
        parts.append((vb - va).reshape(-1))
    return _unit(torch.cat(parts))


def _squared_change(delta: torch.Tensor, factored: bool) -> torch.Tensor:
    import torch

    sq = delta**2
    if factored and sq.dim() == 2:
        return torch.cat([sq.mean(dim=1), sq.mean(dim=0)])
    return sq.reshape(-1)


def _weights(
    a: ModelPart, b: ModelPart, name: str, whole: bool
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The parameter in A and in B: its first :data:`SAMPLE` elements (``whole``: all)."""
    ra = next((r for r in a.records if r.name == name), None)
    rb = next((r for r in b.records if r.name == name), None)
    if ra is None or rb is None or ra.shape != rb.shape or (whole and ra.numel > MAX_FACTORED):
        return None
    try:
        import torch

        def get(m: ModelPart, n: str) -> torch.Tensor:
            t = m.view.load(n)
            return (t if whole else t.reshape(-1)[:SAMPLE]).to(torch.float64)

        return get(a, ra.name), get(b, rb.name)
    except Exception:
        return None


def _row(
    a: ModelPart,
    b: ModelPart,
    opt: OptimizerPart,
    before: OptimizerPart | None,
    pid: int,
    name: str,
) -> tuple[torch.Tensor, torch.Tensor, bool] | None:
    """(what the parameter did, what id ``pid``'s state says it did, both unit vectors; whether
    that came from squared-gradient sums)."""
    weights = _weights(a, b, name, whole=False)
    if weights is None:
        return None
    wa, wb = weights
    direction = _direction(opt, pid, wb)
    if direction is not None:
        change = _unit(wb - wa)
        return (change, direction, False) if change is not None else None
    record = next((r for r in b.records if r.name == name), None)
    if before is None or record is None or record.numel < MIN_SUM_ELEMENTS:
        return None
    factored = "row_var" in opt.states.get(pid, {})
    if factored:
        weights = _weights(a, b, name, whole=True)
        if weights is None:
            return None
        wa, wb = weights
    gained = _gained(before, opt, pid)
    squared = _unit(_squared_change(wb - wa, factored))
    if gained is None or squared is None or gained.numel() != squared.numel():
        return None
    return squared, gained, True


# squared changes against squared-gradient sums: a looser kinship, so a stricter bar, and only
# for tensors with enough elements to make the correlation mean something
FOLLOWS_SUM, MARGIN_SUM, MIN_SUM_ELEMENTS = 0.5, 0.3, 256


MIN_VOTE_ELEMENTS = 16  # a tensor with fewer sampled elements takes no vote
CHANCE = 3.5  # a correlation must be this many standard errors (1/sqrt(n)) above chance


def _consistent(found: list[Misrouted]) -> list[Misrouted]:
    """The moves that form a permutation of one shape class: each source drives one
    parameter, and every source is itself a moved parameter (a reorder moves ids among each
    other). Chance matches between unrelated tensors rarely close up like that."""
    while True:
        moved = {m.pid for m in found}
        sources = [m.source for m in found]
        kept = [m for m in found if m.source in moved and sources.count(m.source) == 1]
        if len(kept) == len(found):
            return kept
        found = kept


def misrouted_updates(
    a: ModelPart, b: ModelPart, opt: OptimizerPart, before: OptimizerPart | None = None
) -> list[Misrouted]:
    """Parameters whose change from A to B fits another id's state in B (``before``: the
    optimizer in A, for optimizers that keep only squared-gradient sums).

    Only where the evidence separates: a tensor votes when its sample has at least
    :data:`MIN_VOTE_ELEMENTS` elements and its best fit is :data:`CHANCE` standard errors
    above chance (a 16-element BatchNorm bias needs 0.875, a 2304-element conv weight the
    plain 0.5); the moves of one shape class count only as a consistent permutation, which
    chance matches among many same-shaped small tensors do not form."""
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
        rows = [(pid, _row(a, b, opt, before, pid, names[pid])) for pid in ids]
        kept = [(p, r[0], r[1]) for p, r in rows if r is not None]
        sums = any(r[2] for _, r in rows if r is not None)
        if len(kept) < 2 or len({c.numel() for _, c, _ in kept}) != 1:
            continue
        n = kept[0][1].numel()
        if n < MIN_VOTE_ELEMENTS:
            continue
        changes = torch.stack([c for _, c, _ in kept])
        directions = torch.stack([d for _, _, d in kept])
        corr = changes @ directions.T  # row k: parameter k's change against every state
        follows, margin = (FOLLOWS_SUM, MARGIN_SUM) if sums else (FOLLOWS, MARGIN)
        follows = max(follows, CHANCE / n**0.5)
        found = []
        for k, (pid, _, _) in enumerate(kept):
            best = int(torch.argmax(corr[k]))
            own, top = float(corr[k, k]), float(corr[k, best])
            if best != k and top >= follows and top - own >= margin:
                found.append(Misrouted(pid, names[pid], kept[best][0], own, top))
        out += _consistent(found)
    return out
