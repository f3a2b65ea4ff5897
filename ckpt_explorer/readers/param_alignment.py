"""Align optimizer ids with model parameters: every assignment consistent with the facts.

torch numbers optimizer states group by group, each group in its own list order; training code
builds each group by filtering the model's parameters in order (weight-decay / no-decay splits,
frozen parameters left out). So each group's ids map to an *ordered subsequence* of the model's
parameter order, the groups use disjoint parameters, and every state shaped like its parameter
(``exp_avg``, ``momentum_buffer``, ...) must have that parameter's shape.

:func:`align` finds, for every id, the set of parameters it can be under *some* assignment that
satisfies all of that: one parameter is a fact (``aligned``), several are ``ambiguous``, and no
assignment at all is an inconsistency that says what does not fit. Nothing is guessed.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ..types import ParamName

Shape = tuple[int, ...]
MAX_CANDIDATES = 64  # candidates kept for an ambiguous id (labels show the first few)


@dataclass(frozen=True)
class ParamOrder:
    """Candidate parameters of a model, in its parameter order when ``ordered``.

    Attributes:
        names: parameter names (tensor names of the model checkpoint).
        shapes: their shapes.
        ordered: True when the order is the model's own parameter order (``named_parameters``
            or a ``state_dict`` saved in order); False for e.g. name-sorted safetensors.
        source: where the order came from, in words.
        maybe_buffers: positions that are probably buffers (left out first, tried again when
            nothing fits without them).
    """

    names: tuple[str, ...]
    shapes: tuple[Shape, ...]
    ordered: bool
    source: str
    maybe_buffers: frozenset[int] = frozenset()

    def without(self, positions: frozenset[int]) -> ParamOrder:
        keep = [i for i in range(len(self.names)) if i not in positions]
        return ParamOrder(
            tuple(self.names[i] for i in keep),
            tuple(self.shapes[i] for i in keep),
            self.ordered,
            self.source,
        )


@dataclass(frozen=True)
class Alignment:
    names: dict[int, ParamName]
    inconsistencies: tuple[str, ...]


class _Positions:
    """Positions of the order by shape, for fast "next position of shape S after j"."""

    def __init__(self, order: ParamOrder) -> None:
        self.n = len(order.names)
        self.by_shape: dict[Shape, list[int]] = {}
        for j, shape in enumerate(order.shapes):
            self.by_shape.setdefault(shape, []).append(j)
        self.every = list(range(self.n))

    def of(self, shape: Shape | None) -> list[int]:
        return self.every if shape is None else self.by_shape.get(shape, [])


def _first_after(pos: list[int], lo: int, blocked: set[int]) -> int | None:
    i = bisect.bisect_right(pos, lo)
    while i < len(pos):
        if pos[i] not in blocked:
            return pos[i]
        i += 1
    return None


def _last_before(pos: list[int], hi: int, blocked: set[int]) -> int | None:
    i = bisect.bisect_left(pos, hi) - 1
    while i >= 0:
        if pos[i] not in blocked:
            return pos[i]
        i -= 1
    return None


def _window(
    ids: Sequence[int], want: dict[int, Shape | None], at: _Positions, blocked: set[int]
) -> tuple[list[int], list[int]] | int:
    """Earliest and latest position of every id of one group in order; on failure, the index
    of the first id that does not fit."""
    left: list[int] = []
    j = -1
    for i, pid in enumerate(ids):
        nxt = _first_after(at.of(want.get(pid)), j, blocked)
        if nxt is None:
            return i
        left.append(nxt)
        j = nxt
    right = [0] * len(ids)
    j = at.n
    for i in range(len(ids) - 1, -1, -1):
        prv = _last_before(at.of(want.get(ids[i])), j, blocked)
        if prv is None:  # cannot happen when the left pass fit; kept for safety
            return i
        right[i] = prv
        j = prv
    return left, right


def _candidates(
    pid: int, lo: int, hi: int, want: dict[int, Shape | None], at: _Positions, blocked: set[int]
) -> list[int]:
    pos = at.of(want.get(pid))
    out = []
    for j in pos[bisect.bisect_left(pos, lo) : bisect.bisect_right(pos, hi)]:
        if j not in blocked:
            out.append(j)
            if len(out) > MAX_CANDIDATES:
                break
    return out


def _fmt_shape(shape: Shape | None) -> str:
    return "any shape" if shape is None else f"shape {list(shape)}"


def _shape_counts_fit(
    groups: Sequence[Sequence[int]], want: dict[int, Shape | None], order: ParamOrder
) -> str | None:
    """None when the states fit the parameters by shape alone (ignoring order), else why not."""
    have = Counter(order.shapes)
    need = Counter(want.get(p) for g in groups for p in g)
    for shape, n in need.items():
        if shape is not None and n > have.get(shape, 0):
            return (
                f"{n} optimizer ids hold states of {_fmt_shape(shape)} but the model has "
                f"{have.get(shape, 0)} parameter(s) of that shape"
            )
    if sum(need.values()) > len(order.names):
        return (
            f"the optimizer has {sum(need.values())} ids but the model has "
            f"{len(order.names)} candidate parameters"
        )
    return None


def _align_ordered(
    groups: Sequence[Sequence[int]], want: dict[int, Shape | None], order: ParamOrder
) -> Alignment:
    at = _Positions(order)
    forced: dict[int, tuple[int, int]] = {}  # position -> (group, id)
    windows: list[tuple[list[int], list[int]]] = []
    for _ in range(len(order.names) + 1):  # propagation reaches a fixpoint in few rounds
        windows = []
        new_forced: dict[int, tuple[int, int]] = {}
        for g, ids in enumerate(groups):
            blocked = {j for j, (gg, _) in forced.items() if gg != g}
            got = _window(ids, want, at, blocked)
            if isinstance(got, int):
                return _ordered_failure(groups, want, order, g, got, at, blocked)
            windows.append(got)
            for i, pid in enumerate(ids):
                if got[0][i] == got[1][i]:
                    j = got[0][i]
                    other = new_forced.get(j)
                    if other is not None and other != (g, pid):
                        return Alignment(
                            {},
                            (
                                f"ids {other[1]} and {pid} can only belong to the same parameter "
                                f"{order.names[j]}",
                            ),
                        )
                    new_forced[j] = (g, pid)
        if new_forced == forced:
            break
        forced = new_forced
    if not _joint_assignment(groups, want, at, forced):
        return Alignment({p: ParamName(None, "unknown") for g in groups for p in g}, ())
    names: dict[int, ParamName] = {}
    for g, ids in enumerate(groups):
        left, right = windows[g]
        blocked = {j for j, (gg, _) in forced.items() if gg != g}
        for i, pid in enumerate(ids):
            if left[i] == right[i]:
                names[pid] = ParamName(order.names[left[i]], "aligned")
            else:
                cands = _candidates(pid, left[i], right[i], want, at, blocked)
                names[pid] = ParamName(
                    None, "ambiguous", tuple(order.names[j] for j in cands[:MAX_CANDIDATES])
                )
    return Alignment(names, ())


def _joint_assignment(
    groups: Sequence[Sequence[int]],
    want: dict[int, Shape | None],
    at: _Positions,
    forced: dict[int, tuple[int, int]],
) -> bool:
    """True when one assignment satisfying every group at once was constructed (the forced
    positions are then facts); False means "not shown", not "impossible"."""
    used: set[int] = set()
    for g, ids in enumerate(groups):
        blocked = used | {j for j, (gg, _) in forced.items() if gg != g}
        got = _window(ids, want, at, blocked)
        if isinstance(got, int):
            return False
        used.update(got[0])
    return True


def _ordered_failure(
    groups: Sequence[Sequence[int]],
    want: dict[int, Shape | None],
    order: ParamOrder,
    g: int,
    i: int,
    at: _Positions,
    blocked: set[int],
) -> Alignment:
    ids = groups[g]
    prefix = _window(ids[:i], want, at, blocked)
    after = order.names[prefix[0][-1]] if not isinstance(prefix, int) and i else None
    pid = ids[i]
    where = f"after {after}" if after else "anywhere"
    msg = (
        f"group {g}: state {pid} ({_fmt_shape(want.get(pid))}) fits no parameter {where} in "
        f"the model's parameter order ({order.source}) once the group's earlier ids are placed"
    )
    by_shape = _shape_counts_fit(groups, want, order)
    if by_shape is None:
        msg += (
            "; the states do fit the parameters by shape, so the optimizer was built with its "
            "parameters in another order than the model's"
        )
    else:
        msg += f"; {by_shape}"
    return Alignment({}, (msg,))


def _align_unordered(
    groups: Sequence[Sequence[int]], want: dict[int, Shape | None], order: ParamOrder
) -> Alignment:
    misfit = _shape_counts_fit(groups, want, order)
    if misfit is not None:
        return Alignment({}, (misfit,))
    at = _Positions(order)
    names: dict[int, ParamName] = {}
    need = Counter(want.get(p) for g in groups for p in g)
    for ids in groups:
        for pid in ids:
            shape = want.get(pid)
            pos = at.of(shape)
            if shape is not None and len(pos) == 1 and need[shape] == 1:
                names[pid] = ParamName(order.names[pos[0]], "aligned")
            else:
                names[pid] = ParamName(
                    None, "ambiguous", tuple(order.names[j] for j in pos[:MAX_CANDIDATES])
                )
    return Alignment(names, ())


def align(
    groups: Sequence[Sequence[int]], want: dict[int, Shape | None], order: ParamOrder
) -> Alignment:
    """Names for every id of ``groups`` (each group's ids in list order) under ``order``.

    Args:
        groups: per param group, its ids in the group's own order.
        want: per id, the shape its parameter must have (None or absent: no constraint).
        order: the model's candidate parameters.

    Returns:
        per id a :class:`ParamName`, or the inconsistencies when no assignment fits.
    """
    run = _align_ordered if order.ordered else _align_unordered
    if order.maybe_buffers:
        first = run(groups, want, order.without(order.maybe_buffers))
        if not first.inconsistencies:
            return first
    return run(groups, want, order)
