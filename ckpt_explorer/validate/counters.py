"""Every step counter of a training state weighed together: optimizer, scheduler, run position.

A resume that forgets one part leaves that part's counter behind: an optimizer not restored
counts the steps since the resume while its scheduler and the run position count the whole
run. Compared one pair at a time, the part that *agrees* with the run position gets blamed
(the scheduler "has taken 10 steps but the optimizer 3"); weighed together, the odd one out is
named. Counters are put in the optimizer's unit first: a run position in micro-steps over a
recorded gradient-accumulation factor, a scheduler stepped once per process (accelerate) by the
process count, a sample-counting scheduler (Megatron's ``num_steps``) by the recorded global
batch size. Where only two counters exist and they disagree, the run position (the loop's own
counter) is the reference; with no run position, the scheduler is compared with the optimizer
as before. An optimizer and scheduler that agree with each other but lag the run position were
both left unrestored when the run records that it skips no steps (fp16 off), else the gap may
be skipped fp16 steps (a warning). An optimizer that keeps no step counter (SGD, Muon) takes
no vote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .bundle import ACCUMULATION_KEYS, claims_certain
from .findings import Finding
from .parts import Components, OptimizerPart, ValuesPart
from .scheduler import effective_step, optimizer_step, scheduler_steps_per_optimizer_step

BATCH_KEYS = ("global_batch_size",)


@dataclass(frozen=True)
class Count:
    """One counter: which part, what it records, and its value in optimizer steps."""

    part: str  # "optimizer" | "scheduler" | "run position"
    shown: str  # "the optimizer step 3", "lr_scheduler last_epoch 10", "iter_num 7"
    steps: float
    file: str | None = None


def _agree(a: float, b: float) -> bool:
    return abs(a - b) <= 1


def recorded_factor(parts: Components, keys: tuple[str, ...]) -> tuple[int, str] | None:
    """A factor the run records under one of ``keys`` (run states, then arguments)."""
    values = [v for rs in parts.run_states for v in rs.values.items()] + list(parts.args.items())
    for key, v in values:
        named = key.rsplit(".", 1)[-1] in keys
        if named and isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v, key
    return None


def _position(
    parts: Components, claims: dict[str, int], opt: float | None
) -> tuple[Count | None, list[Finding]]:
    """The run position in optimizer steps (a recorded accumulation factor divided out)."""
    if len(set(claims.values())) != 1:
        return None, []
    value = next(iter(claims.values()))
    shown = f"the run position {value} ({', '.join(claims)})"
    factor = recorded_factor(parts, ACCUMULATION_KEYS)
    if (
        not claims_certain(parts, claims)  # the writer's counters already count optimizer steps
        and factor is not None
        and factor[0] > 1
        and opt is not None
        and value % factor[0] == 0
        and _agree(value // factor[0], opt)
    ):
        k, key = factor
        note = Finding(
            "bundle.optimizer_step",
            "info",
            f"the optimizer step is {opt:g} but the run position is {value} "
            f"({', '.join(claims)}): {k} × the optimizer step, gradient accumulation "
            f"({key} = {k})",
            "Expected with gradient accumulation (the position counts micro-steps).",
        )
        return Count("run position", shown, value / k), [note]
    return Count("run position", shown, float(value)), []


def scheduler_steps(values: dict[str, Any], parts: Components) -> tuple[int, str] | None:
    """A scheduler's steps taken (``last_epoch`` & co.) and how they were read ("" or the
    unit converted): Megatron's ``num_steps`` counts samples, divided by the recorded global
    batch size; None where the state records no step count."""
    steps = effective_step(values)
    if steps is not None:
        return steps, ""
    if "num_steps" in values and "lr_warmup_steps" in values:
        batch = recorded_factor(parts, BATCH_KEYS)  # Megatron counts samples
        samples = values.get("num_steps")
        if batch is not None and isinstance(samples, int):
            return samples // batch[0], f" (num_steps {samples} ÷ {batch[1]} {batch[0]})"
    return None


def _scheduler(
    sched: ValuesPart, parts: Components, opt: float | None, run_epoch: Any
) -> tuple[Count | None, list[Finding]]:
    """The scheduler's steps in optimizer steps (per-process stepping, sample counts)."""
    values = sched.values
    where = sched.label.rstrip("/") or sched.file or None
    found = scheduler_steps(values, parts)
    if found is None:
        return None, []
    steps, unit = found
    if run_epoch and steps == run_epoch:
        return None, []  # a per-epoch scheduler counts epochs (epoch 0 says nothing)
    counter = "last_epoch" if "last_epoch" in values else "steps"
    shown = f"{where or 'the scheduler'} {counter} {steps}{unit}"
    per = scheduler_steps_per_optimizer_step(parts)
    if per > 1 and opt is not None and not _agree(steps, opt) and _agree(steps, per * opt):
        note = Finding(
            "scheduler.per_process_steps",
            "info",
            f"the scheduler has taken {steps} steps, the optimizer {opt:g}: {per} × {opt:g}, "
            f"one per process ({per} random_states files)",
            "accelerate steps a prepared scheduler once per process unless split_batches=True: "
            "size its total steps for that.",
            file=where,
        )
        return Count("scheduler", shown, steps / per, where), [note]
    return Count("scheduler", shown, float(steps), where), []


def _optimizer(opt: OptimizerPart) -> Count | None:
    declared = opt.view.optimizer is not None and bool(opt.view.optimizer.flat)
    if opt.flat and not declared:  # DeepSpeed's partitions: its per-parameter slices count
        return None
    step = optimizer_step(opt)
    if step is None:
        return None
    return Count("optimizer", f"the optimizer step {step:g}", step, opt.label.rstrip("/") or None)


def weigh(
    parts: Components,
    claims: dict[str, int],
    pairs: list[tuple[OptimizerPart | None, ValuesPart | None]],
    run_epoch: Any = None,
    training_state: bool = False,
) -> list[Finding]:
    """Findings of every (optimizer, scheduler) pair of the state against the run position."""
    out: list[Finding] = []
    seen: set[str] = set()
    for opt, sched in pairs:
        o = _optimizer(opt) if opt is not None else None
        if training_state and opt is not None and o is None and opt.states and not opt.flat:
            out.append(_no_counter(opt))
        p, notes = _position(parts, claims, o.steps if o else None)
        certain = claims_certain(parts, claims)
        s, more = (
            _scheduler(sched, parts, o.steps if o else None, run_epoch) if sched else (None, [])
        )
        for f in [*notes, *more, *_judge(o, s, p, opt, _never_skips(parts), certain)]:
            if f.message not in seen:
                seen.add(f.message)
                out.append(f)
    return out


def _never_skips(parts: Components) -> bool:
    """The run records that it trains without fp16 loss scaling (``fp16`` False in its
    arguments): no optimizer step is skipped, so the optimizer and scheduler keep pace with
    the run position."""
    return parts.args.get("fp16") is False


def _judge(
    o: Count | None,
    s: Count | None,
    p: Count | None,
    opt: OptimizerPart | None,
    never_skips: bool = False,
    certain: bool = True,
) -> list[Finding]:
    """The odd counter out. ``certain``: the run position is known to count optimizer steps
    (the writer's profile says so); otherwise an optimizer that disagrees with the position
    alone is 'cannot tell' (info): the position may count micro-batches."""
    present = [c for c in (o, s, p) if c is not None]
    if len(present) < 2 or all(_agree(a.steps, present[0].steps) for a in present):
        return []
    if o and s and p:
        if _agree(s.steps, p.steps):
            return [_optimizer_behind(o, s, p)]
        if _agree(o.steps, p.steps):
            return [_scheduler_behind(s, o, p)]
        if _agree(o.steps, s.steps):
            if never_skips and o.steps < p.steps:
                return [_both_behind(o, s, p)]
            return [_position_off(o, p, s, certain)]
        return [
            Finding(
                "bundle.optimizer_step",
                "warning",
                f"{o.shown}, {s.shown} and {p.shown} all disagree",
                "The parts come from different saves, or more than one was not restored on "
                "resume: resume from one consistent checkpoint.",
                file=o.file,
            )
        ]
    if o and p:
        return [_position_off(o, p, None, certain)]
    if s and p:  # the optimizer keeps no step counter (SGD, Muon): the scheduler against the run
        return [
            Finding(
                "bundle.scheduler_step",
                "warning",
                f"{s.shown} but {p.shown}"
                + (" (the optimizer keeps no step counter)" if opt is not None else ""),
                "If the scheduler steps once per optimizer step, it was not restored on "
                "resume (ColossalAI #5151): load lr_scheduler before training continues.",
                file=s.file,
            )
        ]
    assert o and s
    return [_scheduler_behind(s, o, None)]


def _optimizer_behind(o: Count, s: Count, p: Count) -> Finding:
    fresh = o.steps <= 1
    return Finding(
        "bundle.optimizer_step",
        "error",
        f"{o.shown} is behind: {s.shown} and {p.shown} agree, so the optimizer "
        + ("is fresh" if fresh else f"counts {o.steps:g} steps, those since a resume")
        + ": it was not restored on resume",
        "Load the optimizer state when resuming (optimizer.load_state_dict / "
        "booster.load_optimizer / accelerator.load_state): with fresh moments Adam takes large "
        "steps and the loss jumps.",
        file=o.file,
    )


def _both_behind(o: Count, s: Count, p: Count) -> Finding:
    return Finding(
        "bundle.optimizer_step",
        "error",
        f"{o.shown} and {s.shown} are both behind {p.shown}, and the run skips no steps "
        "(fp16 off): the optimizer and its scheduler count the steps since a resume that "
        "restored neither",
        "Load the optimizer and the LR scheduler when resuming (Megatron: do not pass "
        "--no-load-optim; torch: optimizer.load_state_dict and lr_scheduler.load_state_dict): "
        "fresh moments and a restarted warm-up make the loss jump.",
        file=o.file,
    )


def _scheduler_behind(s: Count, o: Count, p: Count | None) -> Finding:
    fresh = s.steps <= 1
    agree = f"; {p.shown} agrees with the optimizer" if p else ""
    return Finding(
        "scheduler.optimizer_step",
        "warning",
        f"the scheduler has taken {s.steps:g} steps ({s.shown}) but the optimizer "
        f"{o.steps:g}" + (" — it looks freshly built, not restored" if fresh else "") + agree,
        "If the scheduler steps once per optimizer step, it was not restored on resume "
        "(ColossalAI #5151): load lr_scheduler before training continues.",
        file=s.file,
    )


def _position_off(o: Count, p: Count, s: Count | None, certain: bool = True) -> Finding:
    agree = f"; {s.shown} agrees with the optimizer" if s else ""
    if not certain:
        return Finding(
            "bundle.optimizer_step",
            "info",
            f"the optimizer step is {o.steps:g} but {p.shown}{agree}: cannot tell whether the "
            "run position counts optimizer steps (no writer profile says what it counts)",
            "Expected where the position counts micro-batches (gradient accumulation) or "
            "skipped fp16 steps; otherwise the optimizer is from another checkpoint or was "
            "not restored: compare with the state the run resumed from (ckpt-explorer doctor).",
            file=o.file,
        )
    return Finding(
        "bundle.optimizer_step",
        "warning",
        f"the optimizer step is {o.steps:g} but {p.shown}{agree}, which counts optimizer steps",
        "A small gap may be skipped fp16 steps; otherwise the optimizer is from another "
        "checkpoint or was not restored on resume.",
        file=o.file,
    )


def _no_counter(opt: OptimizerPart) -> Finding:
    states = sorted({n for s in opt.states.values() for n in s})
    return Finding(
        "optimizer.restart_unknown",
        "info",
        f"the optimizer keeps no step counter (its states: {', '.join(states[:4])}): whether "
        "it was restored on resume cannot be told from this state alone",
        "Compare it with the state the run resumed from: ckpt-explorer doctor RESUMED_FROM "
        "THIS (a fresh momentum is small next to a restored one).",
        file=opt.label.rstrip("/.") or None,
    )
