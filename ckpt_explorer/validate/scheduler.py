"""LR scheduler against its optimizer: steps, ``_last_lr`` vs group lr, ``base_lrs``.

ColossalAI's warm-up schedulers (``delayed.py``) stop counting their own ``last_epoch`` when
the warm-up ends and hand over to ``after_scheduler_dict``; their effective step is the sum.
torch's SequentialLR counts its own ``last_epoch``; ChainedScheduler has none: its children
(``_schedulers``, a list or flat ``_schedulers.<i>.`` keys) step together.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from ..io.raw_values import record_scalar
from ..types import TensorRecord
from .findings import Finding
from .parts import Components, OptimizerPart, ValuesPart

CHILD_KEY = re.compile(r"^_schedulers\.(\d+)\.(.+)$")


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def children(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The child scheduler states of a ChainedScheduler / SequentialLR (none otherwise)."""
    nested = values.get("_schedulers")
    if isinstance(nested, list | tuple):
        return [c for c in nested if isinstance(c, dict)]
    flat: dict[int, dict[str, Any]] = {}
    for key, value in values.items():
        m = CHILD_KEY.match(key)
        if m:
            flat.setdefault(int(m.group(1)), {})[m.group(2)] = value
    return [flat[i] for i in sorted(flat)]


def _chained_step(values: dict[str, Any]) -> int | None:
    """ChainedScheduler's steps: its children's (all step together); None if they differ."""
    steps = {effective_step(c) for c in children(values)}
    return steps.pop() if len(steps) == 1 else None


def _epoch_stepped(values: dict[str, Any]) -> bool:
    """CosineAnnealingWarmRestarts stepped with fractional epochs (``step(epoch + i / n)``):
    its ``last_epoch`` counts epochs, not optimizer steps."""
    t_cur = values.get("T_cur")
    return isinstance(t_cur, float) and not t_cur.is_integer()


def effective_step(values: dict[str, Any]) -> int | None:
    """Scheduler steps taken: ``last_epoch`` (plus the after-scheduler's after a warm-up),
    a ChainedScheduler's children's; None where unknown."""
    if _epoch_stepped(values):
        return None
    last = _int(values.get("last_epoch"))
    if last is None and "_last_lr" in values and children(values):
        return _chained_step(values)
    if last is None:
        # DeepSpeed's own schedulers (WarmupLR, ...) count from last_batch_iteration = -1
        batch = _int(values.get("last_batch_iteration"))
        return batch + 1 if batch is not None else None
    after = values.get("after_scheduler_dict")
    if values.get("finished") and isinstance(after, dict) and _int(after.get("last_epoch")):
        return last + int(after["last_epoch"])
    prefixed = _int(values.get("after_scheduler_dict.last_epoch"))
    if values.get("finished") and prefixed is not None:
        return last + prefixed
    return last


def drives_momentum(values: dict[str, Any] | None) -> bool:
    """The scheduler sets the groups' momentum each step (``cycle_momentum`` of OneCycleLR and
    CyclicLR): their betas / momentum are the schedule's position, not settings."""
    return bool((values or {}).get("cycle_momentum"))


def scheduler_steps_per_optimizer_step(parts: Components) -> int:
    """Scheduler steps one optimizer step makes, where the files show it: accelerate steps a
    prepared scheduler once per process (unless ``split_batches``), and its ``save_state``
    writes one ``random_states_<i>.pkl`` per process. 1 otherwise."""
    return max(1, sum(1 for rs in parts.run_states if rs.traits.accelerate_rng))


def optimizer_step(opt: OptimizerPart) -> float | None:
    """The step most params of ``opt`` have; where no param state holds one, the step most
    param groups hold (LAMB implementations, Adan: one ``step`` per group; schedule-free
    optimizers count theirs in the group's ``k``). None for an optimizer that keeps no step
    counter (SGD, Muon)."""
    steps = list(opt.steps().values()) or _group_steps(opt)
    if not steps:
        return None
    return Counter(steps).most_common(1)[0][0]


def _group_steps(opt: OptimizerPart) -> list[float]:
    tensors = {r.name: r for r in opt.view.tensors}
    out = []
    for i, g in enumerate(opt.groups):
        value = g.get("step", tensors.get(f"{opt.prefix}param_groups.{i}.step"))
        if value is None and "weight_sum" in g:  # schedulefree: k steps taken
            value = g.get("k")
        if isinstance(value, TensorRecord):
            value = _scalar(opt, value)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.append(float(value))
    return out


def _scalar(opt: OptimizerPart, record: TensorRecord) -> float | None:
    """A one-element tensor's value: from the file's bytes, else loaded through torch."""
    if record.numel != 1:
        return None
    try:
        value = record_scalar(record)
        return value if value is not None else float(opt.view.load(record.name).reshape(-1)[0])
    except Exception:
        return None


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


def check_scheduler(sched: ValuesPart, opt: OptimizerPart | None) -> list[Finding]:
    """Findings of one scheduler against the optimizer it drives (its steps against the other
    counters: :mod:`.counters`)."""
    v = sched.values
    where = sched.label.rstrip("/") or sched.file or None
    out: list[Finding] = []
    last, count = _int(v.get("last_epoch")), _int(v.get("_step_count"))
    # count 0: a step() that does not count (CosineAnnealingWarmRestarts overrides it)
    if last is not None and count and count != last + 1:
        # count < last + 1: built with last_epoch set (a scheduler rebuilt on resume or after
        # add_param_group) or a _step_count not restored: one state cannot tell which
        behind = count < last + 1
        out.append(
            Finding(
                "scheduler.step_count",
                "info" if behind else "warning",
                f"_step_count {count} is not last_epoch + 1 ({last + 1})"
                + (
                    ": the scheduler was built with last_epoch set (rebuilt on resume or "
                    "after add_param_group), or its _step_count was not restored; the files "
                    "cannot tell which"
                    if behind
                    else ""
                ),
                "Harmless for a scheduler rebuilt with last_epoch=N; a _step_count not "
                "restored can restart warm-ups (torchtune #2730): compare with the state the "
                "run resumed from (ckpt-explorer doctor)."
                if behind
                else "The scheduler was stepped with an explicit epoch, or its state was edited.",
                file=where,
            )
        )
    if opt is None:
        return out
    groups = opt.groups
    last_lr = v.get("_last_lr")
    if isinstance(last_lr, list | tuple) and groups:
        if len(last_lr) != len(groups):
            out.append(
                Finding(
                    "scheduler.group_count",
                    "error",
                    f"_last_lr has {len(last_lr)} entries but the optimizer {len(groups)} groups",
                    "The scheduler belongs to an optimizer with other param groups.",
                    file=where,
                )
            )
        else:
            for i, s_lr, lr in _disagree(last_lr, groups, "lr"):
                out.append(
                    Finding(
                        "scheduler.last_lr",
                        "warning",
                        f"_last_lr[{i}] is {s_lr:.6g} but group {i} lr is {lr:.6g}",
                        "Scheduler and optimizer were saved at different points, or "
                        "the lr was changed by hand after the scheduler stepped.",
                        file=where,
                    )
                )
    base = v.get("base_lrs")
    if isinstance(base, list | tuple) and len(base) == len(groups):
        for i, b, init in _disagree(base, groups, "initial_lr"):
            out.append(
                Finding(
                    "scheduler.base_lrs",
                    "warning",
                    f"base_lrs[{i}] is {b:.6g} but group {i} initial_lr is {init:.6g}",
                    "The scheduler was built for a different peak lr than the "
                    "optimizer's; rebuild one of them from the same config.",
                    file=where,
                )
            )
    return out


def _disagree(
    values: list[Any] | tuple[Any, ...], groups: list[dict[str, Any]], key: str
) -> Iterator[tuple[int, float, float]]:
    """(i, values[i], groups[i][key]) where both are numbers that are not close."""
    for i, (x, g) in enumerate(zip(values, groups, strict=True)):
        y = g.get(key)
        if (
            isinstance(x, int | float)
            and isinstance(y, int | float)
            and not _close(float(x), float(y))
        ):
            yield i, x, y
