"""Anomalies of a run, each from the step where it starts, with its evidence.

Counter rules reuse the resume doctor's (``resume.doctor.scheduler_cause`` /
``moments_cause``: a counter that went back, or one that equals the steps run since a resume
instead of continuing); they get the facts of two consecutive checkpoints, so the doctor's
tensor reads are not repeated.
Nothing is reported where the files cannot decide it.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Any, cast

from ..readers.roles import MOMENTS
from ..resume.doctor import moments_cause, scheduler_cause
from ..resume.evidence import Side
from ..validate.scheduler import drives_momentum
from .passes import is_model_tensor
from .spikes import update_outliers
from .summaries import Anomaly, CheckpointSummary, PairSummary

ROLES = ("model", "optimizer", "scheduler", "rng", "run_state")
ORDER = {"error": 0, "warning": 1, "info": 2}
# A step name that should equal the recorded step (accelerate's checkpoint_N counts saves).
NAMED_STEPS = ("hf", "colossalai", "deepspeed", "step", "file", "parts")
# Where a step comes from when no run state records one (a timm file records only ``epoch``).
_UNRECORDED = ("optimizer step", "name")
MTIME_SLACK_S = 2.0


def _side(s: CheckpointSummary) -> Side:
    """The doctor's view of one checkpoint, from its summary (no view: no tensor is read)."""
    return Side(
        view=cast(Any, None),
        parts=cast(Any, None),
        opt=None,
        opt_step=s.opt_step,
        sched_step=s.sched_step,
        sched_values=s.scheduler,
        position=s.step if s.step_source != "name" else None,
        has_rng=s.has_rng,
        has_run_state="run_state" in s.parts,
    )


def _a(s: CheckpointSummary, kind: str, severity: str, msg: str, ev: list[str]) -> Anomaly:
    return Anomaly(s.step, kind, severity, msg, ev, s.path)


def _label(s: CheckpointSummary) -> str:
    return f"step {s.step}" if s.step is not None else s.path.rsplit("/", 1)[-1]


def _discovery(cks: list[CheckpointSummary], naming: dict[str, str]) -> list[Anomaly]:
    out = []
    readable = [s for s in cks if s.error is None]
    for s in cks:
        if s.error is not None:
            out.append(_a(s, "unreadable", "error", "checkpoint could not be read", [s.error]))
        elif s.step_source == "name":
            out.append(
                _a(
                    s,
                    "step_from_name",
                    "info",
                    f"no step recorded in the files; step {s.step} taken from the name"
                    + (" (it numbers the epoch the file records)" if _named_by_epoch(s) else ""),
                    [f"{s.path}: no trainer_state.json, run state, meta or optimizer step"],
                )
            )
        elif s.step is None:
            out.append(_a(s, "step_from_name", "info", "step unknown (none recorded)", []))
        elif (
            s.name_step is not None
            and naming.get(s.path) in NAMED_STEPS
            and s.name_step != s.step
            and not _named_by_epoch(s)
        ):
            out.append(
                _a(
                    s,
                    "step_name_mismatch",
                    "warning",
                    f"{s.path.rsplit('/', 1)[-1]} records step {s.step}: written by another run "
                    "or renamed",
                    [f"{k}: {v}" for k, v in s.claims.items()]
                    + [f"{s.step_source}: {s.step}"] * (s.step_source in _UNRECORDED)
                    + [f"epoch: {s.epoch}"] * (s.epoch is not None),
                )
            )
    steps = Counter(s.step for s in readable if s.step is not None)
    for step, n in steps.items():
        if n > 1:
            same = [s for s in readable if s.step == step]
            out.append(
                _a(
                    same[0],
                    "duplicate_step",
                    "warning",
                    f"{n} checkpoints record step {step}",
                    [f"{s.path} ({s.step_source})" for s in same],
                )
            )
    known = [s for s in readable if s.step is not None]
    gaps = [b.step - a.step for a, b in itertools.pairwise(known)]  # type: ignore[operator]
    if len(gaps) >= 3:
        every = Counter(gaps).most_common(1)[0][0]
        for (a, b), gap in zip(itertools.pairwise(known), gaps, strict=True):
            if every > 0 and gap > every and gap % every == 0 and gap // every > 1:
                out.append(
                    _a(
                        b,
                        "step_gap",
                        "info",
                        f"no checkpoint between step {a.step} and {b.step} (saved every {every})",
                        [f"{gap // every - 1} checkpoint(s) missing or deleted"],
                    )
                )
    out += _mtime_order(known)
    return out


def _named_by_epoch(s: CheckpointSummary) -> bool:
    """The name numbers the epoch the file records, and no run state records a step
    (timm's ``checkpoint-<epoch>.pth.tar``): the name is no step to check."""
    return s.epoch is not None and s.name_step == s.epoch and s.step_source in _UNRECORDED


def _mtime_order(known: list[CheckpointSummary]) -> list[Anomaly]:
    """A checkpoint older than the one before it: leftovers of an earlier run. Not claimed
    when the modification times follow the names' alphabetical order (a folder copied
    without keeping times: ``cp -r`` writes checkpoint-10 before checkpoint-2)."""
    by_time = [s.path for s in sorted(known, key=lambda s: s.mtime)]
    if by_time == sorted(s.path for s in known) and by_time != [s.path for s in known]:
        return [
            _a(
                known[0],
                "mtime_order_unused",
                "info",
                "modification times follow the names' alphabetical order (a copy?): not used "
                "to tell runs apart",
                [],
            )
        ]
    out = []
    for a, b in itertools.pairwise(known):
        if b.step != a.step and b.mtime + MTIME_SLACK_S < a.mtime:
            out.append(
                _a(
                    b,
                    "mixed_runs",
                    "warning",
                    f"{_label(b)} was written before {_label(a)}: the folder holds checkpoints of "
                    "more than one run (a resume from an earlier checkpoint left older ones)",
                    [
                        f"{a.path} modified {time_text(a.mtime)}",
                        f"{b.path} modified {time_text(b.mtime)}",
                    ],
                )
            )
    return out


def time_text(t: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _parts(cks: list[CheckpointSummary]) -> list[Anomaly]:
    readable = [s for s in cks if s.error is None]
    out = []
    for role in ROLES:
        having = [role in s.parts for s in readable]
        if not any(having) or all(having):
            continue
        start = None
        for i, (s, has) in enumerate(zip(readable, having, strict=True)):
            if not has and start is None:
                start = i
            if start is not None and (has or i == len(readable) - 1):
                end = i if not has else i - 1
                first, last = readable[start], readable[end]
                span = _label(first) if start == end else f"{_label(first)} to {_label(last)}"
                out.append(
                    _a(
                        first,
                        "part_missing",
                        "warning",
                        f"no {role} in {span}, though other checkpoints of the run have one",
                        [
                            f"{s.path}: parts {', '.join(s.parts) or 'none'}"
                            + (
                                f"; files not recognised as any part: {', '.join(s.unrecognised)}"
                                if s.unrecognised
                                else ""
                            )
                            for s in readable[start : end + 1]
                        ][:6],
                    )
                )
                start = None
    return out


def _projected_scheduler(
    sched_a: CheckpointSummary, between: list[CheckpointSummary], b: CheckpointSummary
) -> tuple[Any, list[str]]:
    """A restart at a checkpoint saved *without* a scheduler (the resume point), between
    ``sched_a`` and ``b``: the doctor's rule against the value the scheduler would have had
    there at ``sched_a``'s rate (scheduler steps per step). ``(None, [])`` when nothing fits."""
    a_pos, a_count = _side(sched_a).position, sched_a.sched_step
    if not a_pos or a_count is None:
        return None, []
    rate = a_count / a_pos
    for r in reversed(between):
        r_side = _side(r)
        if r_side.position is None or r_side.position <= a_pos:
            continue
        r_side.sched_step = round(a_count + (r_side.position - a_pos) * rate)
        r_side.sched_values = None
        cause = scheduler_cause(r_side, _side(b))
        if cause is not None and cause.score >= 0.95:
            note = (
                f"{_label(r)} ({r.path}) saved no scheduler; at {sched_a.path}'s rate its "
                f"scheduler would have taken {r_side.sched_step} steps there"
            )
            return cause, [f"A = {_label(r)}, B = {_label(b)}", note]
    return None, []


def _counters(
    sched_a: CheckpointSummary | None,
    opt_a: CheckpointSummary | None,
    b: CheckpointSummary,
    between: list[CheckpointSummary],
) -> list[Anomaly]:
    """``b`` against the latest earlier checkpoint that has a scheduler (``sched_a``) and an
    optimizer step (``opt_a``): a checkpoint saved without one does not hide a restart, even
    when the run resumed from it (``between``: the checkpoints after ``sched_a`` before ``b``)."""
    out = []
    sb = _side(b)
    cause = scheduler_cause(_side(sched_a), sb) if sched_a is not None else None
    head: list[str] = []
    if sched_a is not None:
        head = [f"A = {_label(sched_a)} ({sched_a.path}), B = {_label(b)}"]
        if cause is None or cause.score < 0.85:
            cause, head = _projected_scheduler(sched_a, between, b)
    if cause is not None and cause.score >= 0.85:
        ev = head + list(cause.evidence)
        out.append(
            _a(b, "lr_restart", "error", "LR scheduler restarted (not restored on resume)", ev)
        )
    if opt_a is not None and _fresh_optimizer(opt_a, b):
        ev = [
            f"A = {_label(opt_a)} ({opt_a.path}), B = {_label(b)}",
            f"A's optimizer is at step {opt_a.opt_step:g} with moments; B's holds param groups "
            "but no state (no step, no exp_avg): a freshly built optimizer's save",
        ]
        ev += [f"{f} = {what}" for f, what in b.files.items() if "optimizer" in what]
        out.append(
            _a(b, "optimizer_reset", "error", "optimizer state reset (moments restarted)", ev)
        )
        return out
    cause = moments_cause(_side(opt_a), sb) if opt_a is not None else None
    if cause is not None and opt_a is not None:
        a = opt_a
        went_back = any("went back" in e for e in cause.evidence)
        from_scratch = any("from scratch" in e for e in cause.evidence)
        ev = [f"A = {_label(a)} ({a.path}), B = {_label(b)}"]
        ev += list(cause.evidence) + _moment_evidence(a, b)
        if from_scratch or (
            went_back and b.step is not None and a.step is not None and b.step > a.step
        ):
            out.append(
                _a(b, "optimizer_reset", "error", "optimizer state reset (moments restarted)", ev)
            )
        else:
            out.append(_a(b, "step_back", "error", "optimizer step counter went back", ev))
    return out


def _fresh_optimizer(a: CheckpointSummary, b: CheckpointSummary) -> bool:
    """``b`` saved an optimizer that holds no state at all while ``a``'s held moments."""
    had = any(t.state in MOMENTS for t in a.tensors.values())
    state = any(t.state is not None for t in b.tensors.values())
    return had and "optimizer" in b.parts and b.opt_step is None and not state


def _moment_evidence(a: CheckpointSummary, b: CheckpointSummary) -> list[str]:
    ev = []
    for g, moms in sorted(b.moments.items()):
        for state, nb in sorted(moms.items()):
            na = a.moments.get(g, {}).get(state)
            if na:
                ev.append(f"{g} ‖{state}‖: {na:.3g} at step {a.step} → {nb:.3g} at step {b.step}")
    return ev[:6]


def _hyper(a: CheckpointSummary, b: CheckpointSummary) -> list[Anomaly]:
    out = []
    lr_ev, other = [], []
    keys = ["betas", "eps", "weight_decay", "momentum", "amsgrad"]
    if drives_momentum(a.scheduler) or drives_momentum(
        b.scheduler
    ):  # OneCycleLR / CyclicLR set them each step
        keys = [k for k in keys if k not in ("betas", "momentum")]
    for i, (ga, gb) in enumerate(zip(a.groups, b.groups, strict=False)):
        for key in ("initial_lr",):
            if key in ga and key in gb and not _same(ga[key], gb[key]):
                lr_ev.append(f"group {i} {key}: {ga[key]} → {gb[key]}")
        for key in keys:
            if key in ga and key in gb and not _same(ga[key], gb[key]):
                other.append(f"group {i} {key}: {ga[key]} → {gb[key]}")
    ba = (a.scheduler or {}).get("base_lrs")
    bb = (b.scheduler or {}).get("base_lrs")
    if isinstance(ba, list) and isinstance(bb, list) and not _same(ba, bb):
        lr_ev.append(f"scheduler base_lrs: {ba} → {bb}")
    if len(a.groups) != len(b.groups) and a.groups and b.groups:
        other.append(f"param groups: {len(a.groups)} → {len(b.groups)}")
    if lr_ev:
        for i, (ga, gb) in enumerate(zip(a.groups, b.groups, strict=False)):
            lr_ev.append(
                f"group {i} lr: {ga.get('lr')} at step {a.step} → {gb.get('lr')} at step {b.step}"
            )
        out.append(
            _a(b, "lr_jump", "warning", "the peak learning rate changed between checkpoints", lr_ev)
        )
    if other:
        out.append(
            _a(b, "hyperparameters_changed", "warning", "optimizer hyperparameters changed", other)
        )
    return out


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, int | float) and isinstance(y, int | float):
        return math.isclose(float(x), float(y), rel_tol=1e-6, abs_tol=1e-15)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_same(p, q) for p, q in zip(x, y, strict=True))
    return bool(x == y)


def _tensors(a: CheckpointSummary, b: CheckpointSummary, p: PairSummary) -> list[Anomaly]:
    out = []
    bad = []
    for name, fb in b.tensors.items():
        nb = (fb.nan or 0) + (fb.inf or 0)
        fa = a.tensors.get(name)
        na = (fa.nan or 0) + (fa.inf or 0) if fa is not None else 0
        if nb and not na:
            bad.append(f"{name}: {fb.nan or 0} NaN, {fb.inf or 0} Inf")
    if bad:
        out.append(_a(b, "nan_inf", "error", f"NaN/Inf appeared in {len(bad)} tensors", bad[:8]))
    if p.dtype_changes:
        ev = [f"{n}: {x} → {y}" for n, (x, y) in list(p.dtype_changes.items())[:8]]
        out.append(
            _a(b, "dtype_change", "warning", f"dtype changed in {len(p.dtype_changes)} tensors", ev)
        )
    if p.shape_changes:
        ev = [f"{n}: {x} → {y}" for n, (x, y) in list(p.shape_changes.items())[:8]]
        out.append(
            _a(b, "shape_change", "error", f"shape changed in {len(p.shape_changes)} tensors", ev)
        )
    if p.only_a or p.only_b:
        ev = [f"{n}: only up to {_label(a)}" for n in p.only_a[:4]]
        ev += [f"{n}: only from {_label(b)}" for n in p.only_b[:4]]
        out.append(
            _a(
                b,
                "tensors_missing",
                "warning",
                f"{len(p.only_a) + len(p.only_b)} model tensors present on one side only",
                ev,
            )
        )
    return out


def _stuck(a: CheckpointSummary, b: CheckpointSummary, p: PairSummary) -> list[str]:
    """Model tensors with optimizer state whose bytes did not change while the optimizer
    stepped. A parameter without optimizer state (LoRA's frozen base, requires_grad=False)
    is frozen by design; ids whose parameter name is unknown are never claimed."""
    stepped = a.opt_step is not None and b.opt_step is not None and b.opt_step > a.opt_step
    if not stepped or not p.unchanged or b.trainable is None:
        return []
    trainable = set(b.trainable)
    return [n for n in p.unchanged if n.rsplit("/", 1)[-1] in trainable]


def _frozen(readable: list[CheckpointSummary], pairs: list[PairSummary]) -> list[Anomaly]:
    """One warning per stretch of pairs where trainable tensors stopped moving, at its start."""
    out = []
    stuck = [_stuck(a, b, p) for a, b, p in zip(readable, readable[1:], pairs, strict=False)]
    for i, names in enumerate(stuck):
        new = [n for n in names if i == 0 or n not in stuck[i - 1]]
        if not new:
            continue
        a, b = readable[i], readable[i + 1]
        end = i
        while end + 1 < len(stuck) and set(new) <= set(stuck[end + 1]):
            end += 1
        until = readable[end + 1]
        ev = [f"optimizer step {a.opt_step:g} → {until.opt_step:g}"]
        ev += [
            f"{n}: identical bytes from {_label(a)} to {_label(until)}, has optimizer state"
            for n in new[:8]
        ]
        model = [n for n, f in b.tensors.items() if is_model_tensor(f)]
        what = (
            "no model weight changed"
            if len(new) == len(model)
            else f"{len(new)} trainable tensors stopped changing"
        )
        out.append(_a(b, "frozen", "warning", what + " though the optimizer stepped", ev))
    return out


def _unnumbered_copy(
    step: int | None,
    readable: list[CheckpointSummary],
    pairs: list[PairSummary],
    naming: dict[str, str],
) -> bool:
    """The checkpoints recording ``step`` are one with a step in its name and copies named
    without one (``last.pt`` beside ``ckpt_8.pt``) whose model tensors are all unchanged."""
    idx = [i for i, s in enumerate(readable) if s.step == step]
    if len(idx) < 2 or idx != list(range(idx[0], idx[-1] + 1)) or idx[-1] > len(pairs):
        return False
    if sum(naming.get(readable[i].path) != "content" for i in idx) > 1:
        return False
    between = [pairs[i] for i in idx[:-1]]
    return all(
        p.ratios
        and not any(p.ratios.values())
        and not (p.only_a or p.only_b or p.shape_changes or p.dtype_changes)
        for p in between
    )


def find_anomalies(
    cks: list[CheckpointSummary], pairs: list[PairSummary], naming: dict[str, str]
) -> list[Anomaly]:
    """Every anomaly of the run: discovery, parts, counters, hyperparameters, tensors,
    update-ratio outliers; sorted by step, errors first."""
    out = _discovery(cks, naming) + _parts(cks)
    readable = [s for s in cks if s.error is None]
    first = readable[0] if readable else None
    if first is not None:
        bad = [
            f"{n}: {f.nan or 0} NaN, {f.inf or 0} Inf"
            for n, f in first.tensors.items()
            if (f.nan or 0) + (f.inf or 0)
        ]
        if bad:
            out.append(_a(first, "nan_inf", "error", f"NaN/Inf in {len(bad)} tensors", bad[:8]))
    sched_a = opt_a = None
    without_sched: list[CheckpointSummary] = []
    for a, b, p in zip(readable, readable[1:], pairs, strict=False):
        if a.sched_step is not None:
            sched_a, without_sched = a, []
        else:
            without_sched.append(a)
        opt_a = a if a.opt_step is not None else opt_a
        out += _counters(sched_a, opt_a, b, without_sched) + _hyper(a, b) + _tensors(a, b, p)
    out += _frozen(readable, pairs) + update_outliers(readable, pairs)
    for found in out:
        if found.kind == "duplicate_step" and _unnumbered_copy(found.step, readable, pairs, naming):
            copies = ", ".join(
                s.path.rsplit("/", 1)[-1]
                for s in readable
                if s.step == found.step and naming.get(s.path) == "content"
            )
            found.severity = "info"
            found.message += f": a copy under a name without a step ({copies}), identical weights"
    return sorted(out, key=lambda x: (x.step is None, x.step or 0, ORDER[x.severity], x.kind))
