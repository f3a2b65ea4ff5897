"""Which optimizer each LR scheduler drives, decided by evidence.

A state may hold several optimizers and several schedulers (Muon for the matrices and AdamW
for the rest, each with its own scheduler; accelerate's ``optimizer_k`` / ``scheduler_k``;
Lightning's lists). A torch scheduler records what it set: ``_last_lr`` (the lr it gave each
group at its last step) and ``base_lrs`` (each group's ``initial_lr``); the optimizer it drives
has as many groups with those lrs. Each scheduler is paired with the optimizer its values fit
best; names (``scheduler_k`` with ``optimizer_k``, ``schedulers.1`` with ``optimizers.1``)
decide only where the values fit several equally, and the first optimizer with groups is the
last resort, as before.
"""

from __future__ import annotations

import math
from typing import Any

from ..readers.part_pairing import paired
from .parts import OptimizerPart, ValuesPart


def _close(a: Any, b: Any) -> bool:
    return (
        isinstance(a, int | float)
        and isinstance(b, int | float)
        and math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-12)
    )


def fit(sched: ValuesPart, opt: OptimizerPart) -> int:
    """How many of the scheduler's recorded lrs the optimizer's groups hold (-1: the group
    counts differ, so it cannot be this optimizer's scheduler)."""
    groups = opt.groups
    score = 0
    for key, group_key in (("_last_lr", "lr"), ("base_lrs", "initial_lr")):
        lrs = sched.values.get(key)
        if not isinstance(lrs, list | tuple):
            continue
        if len(lrs) != len(groups):
            return -1
        score += sum(_close(lr, g.get(group_key)) for lr, g in zip(lrs, groups, strict=True))
    return score


def _index(label: str) -> str | None:
    """The list index in a one-file part's name (``schedulers.1`` -> ``1``)."""
    stem = label.rstrip("/.")
    tail = stem.rsplit(".", 1)[-1]
    return tail if tail.isdigit() else None


def pair_schedulers(
    optimizers: list[OptimizerPart], schedulers: list[ValuesPart]
) -> list[tuple[OptimizerPart | None, ValuesPart | None]]:
    """``(optimizer, its scheduler)`` for every optimizer and every scheduler (None where
    a part has no partner)."""
    usable = [o for o in optimizers if o.groups and not o.flat]
    taken: dict[int, ValuesPart] = {}
    loose: list[ValuesPart] = []
    for sched in schedulers:
        choice = _choose(sched, usable, taken)
        if choice is None:
            loose.append(sched)
        else:
            taken[id(choice)] = sched
    pairs: list[tuple[OptimizerPart | None, ValuesPart | None]] = [
        (o, taken.get(id(o))) for o in optimizers
    ]
    pairs += [(None, s) for s in loose]
    return pairs


def _choose(
    sched: ValuesPart, usable: list[OptimizerPart], taken: dict[int, ValuesPart]
) -> OptimizerPart | None:
    free = [o for o in usable if id(o) not in taken] or usable
    if not free:
        return None
    scores = {id(o): fit(sched, o) for o in free}
    fitting = [o for o in free if scores[id(o)] >= 0] or free
    best = max(scores[id(o)] for o in fitting)
    top = [o for o in fitting if scores[id(o)] == best]
    if len(top) == 1:
        return top[0]
    own = paired(sched.label, [o.label for o in top])
    by_label = next((o for o in top if o.label == own), None)
    if by_label is not None:
        return by_label
    index = _index(sched.label)
    by_index = next((o for o in top if index is not None and _index(o.label) == index), None)
    return by_index or top[0]
