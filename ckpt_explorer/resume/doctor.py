"""The resume doctor: why does the loss jump after resuming? Ranked causes with evidence.

``a`` is the training state that was resumed from; ``b`` one saved after resuming (or from an
uninterrupted reference run). Each cause gets a score in [0, 1] from the strength of its
evidence; the report lists the causes that have any, strongest first.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..api import as_view
from ..contracts import ProgressFn
from ..readable import readable_pair
from ..validate.bundle import position_claims
from ..validate.counters import scheduler_steps
from ..validate.parts import Components, OptimizerPart, collect
from ..validate.scheduler import (
    drives_momentum,
    optimizer_step,
)
from ..validate.scheduler_pairing import pair_schedulers
from ..view import CheckpointView
from .evidence import Side, compare_tensors, zero_moments
from .momentum import fresh_momentum
from .report import Cause, DoctorReport
from .state_match import misrouted_updates

if TYPE_CHECKING:
    from ..io.location import Location


def _sides(view: CheckpointView) -> list[Side]:
    """One side per optimizer of the state (each with the scheduler that drives it), or one
    without an optimizer."""
    parts = collect(view)
    claims = position_claims(view.path, parts)
    pairs = [
        p
        for p in pair_schedulers(parts.optimizers, parts.schedulers)
        if p[0] is None or p[0].groups
    ]
    with_opt = [p for p in pairs if p[0] is not None]
    if not with_opt:
        first = parts.schedulers[0] if parts.schedulers else None
        with_opt = [(None, first)]
    out = []
    for opt, sched in with_opt:
        out.append(
            Side(
                view,
                parts,
                opt,
                optimizer_step(opt) if opt else None,
                _scheduler_step(sched.values, parts) if sched else None,
                sched.values if sched else None,
                next(iter(claims.values()), None),
                any(rs.has_rng for rs in parts.run_states),
                bool(claims) or any(rs.values for rs in parts.run_states),
            )
        )
    return out


def _scheduler_step(values: dict[str, Any], parts: Components) -> int | None:
    found = scheduler_steps(values, parts)
    return found[0] if found is not None else None


def _matched(a: list[Side], b: list[Side]) -> list[tuple[Side, Side]]:
    """A's and B's sides of the same optimizer (by its label, else in order)."""
    by_label = {s.opt.label: s for s in b if s.opt is not None}
    out = []
    for i, sa in enumerate(a):
        sb = by_label.get(sa.opt.label) if sa.opt is not None else None
        out.append((sa, sb if sb is not None else b[min(i, len(b) - 1)]))
    return out


def resume_doctor(
    a: str | Path | Location | CheckpointView,
    b: str | Path | Location | CheckpointView,
    *,
    compare_weights: bool = True,
    progress: ProgressFn | None = None,
) -> DoctorReport:
    """Rank the likely causes of a loss mismatch between state ``a`` and state ``b``.

    Args:
        a: the training state that was resumed from.
        b: a state saved after resuming, or from a reference run.
        compare_weights: also diff every tensor (streamed, via the diff engine).
        progress: called with :class:`~ckpt_explorer.contracts.Progress` events of that
            diff (stage ``"compare"``, bytes).

    Example:
        >>> report = resume_doctor("run/step-6000", "run/step-6010")   # doctest: +SKIP
        >>> report.top.cause, report.top.evidence                       # doctest: +SKIP
    """
    va, vb = as_view(a), as_view(b)
    pairs = _matched(_sides(va), _sides(vb))
    sa, sb = pairs[0]
    causes: list[Cause] = []
    for x, y in pairs:  # each optimizer with its own scheduler
        for rule in (moments_cause, scheduler_cause, _param_order, _hyper):
            cause = rule(x, y)
            if cause is not None:
                causes.append(cause)
    for found in (_rng(sa, sb), _rng_restored(va, vb), _another_run(sa, sb), _stale_pointer(sa)):
        if found is not None:
            causes.append(found)
    causes = _folded(_with_part_steps(_merged(causes), _part_findings(sa, sb)))
    if compare_weights:
        causes = _merged(causes + compare_tensors(va, vb, sa, sb, progress))
    facts = {
        "optimizer step": (sa.opt_step, sb.opt_step),
        "scheduler steps": (sa.sched_step, sb.sched_step),
        "run position": (sa.position, sb.position),
        "RNG state saved": (sa.has_rng, sb.has_rng),
    }
    return DoctorReport(str(va.path), str(vb.path), causes, facts, expected_b(facts))


COUNTERS = ("optimizer step", "scheduler steps", "run position")


def expected_b(facts: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """What B should say after resuming from A: a counter A's value plus the steps run since
    (the run positions' difference; None when the positions are not both known), anything
    else A's own value."""
    pa, pb = facts.get("run position", (None, None))
    ran = pb - pa if isinstance(pa, int | float) and isinstance(pb, int | float) else None
    out: dict[str, Any] = {}
    for k, (a, _b) in facts.items():
        if k not in COUNTERS:
            out[k] = a
        elif ran is not None and isinstance(a, int | float) and not isinstance(a, bool):
            # a counter moves with the run position (scaled where it counts other units)
            rate = a / pa if k != "run position" and pa else 1.0
            out[k] = a + ran * rate
        else:
            out[k] = None
    return out


def _merged(causes: list[Cause]) -> list[Cause]:
    """One cause per name: the highest score, the evidence of all (first seen first)."""
    out: dict[str, Cause] = {}
    for c in causes:
        seen = out.get(c.cause)
        if seen is None:
            out[c.cause] = c
            continue
        evidence = seen.evidence + tuple(e for e in c.evidence if e not in seen.evidence)
        best = c if c.score > seen.score else seen
        out[c.cause] = replace(best, evidence=evidence)
    return list(out.values())


def _fmt(x: float | None) -> str:
    return "none" if x is None else f"{x:g}"


def _near(x: float, y: float) -> bool:
    """Equal up to one step (or 2 % of a long stretch: skipped fp16 steps, rounding)."""
    return abs(x - y) <= max(1.0, 0.02 * abs(y))


def _since_resume(
    a: Side, b: Side, a_count: float | None, other: tuple[float | None, float | None]
) -> float | None:
    """Steps of a counter (A's value ``a_count``) that B ran since resuming from A: from the
    run positions, else from ``other`` (the same pair of another counter, e.g. the
    scheduler's for the optimizer) when that one moved forward; scaled to this counter."""
    if a.position is not None and b.position is not None and b.position > a.position:
        rate = a_count / a.position if a_count and a.position else 1.0
        return (b.position - a.position) * rate
    oa, ob = other
    if oa and ob is not None and a_count and ob > oa:
        return (ob - oa) * a_count / oa
    return None


def moments_cause(a: Side, b: Side) -> Cause | None:
    ev: list[str] = []
    score = 0.0
    if a.opt is not None and b.opt is None:
        ev.append("A has optimizer state, B has none")
        score = 0.9
    if a.opt_step is not None and b.opt_step is not None and b.opt_step < a.opt_step:
        ev.append(
            f"optimizer step went back: A {a.opt_step:g}, B {b.opt_step:g} "
            "(B should be at least A's after a resume)"
        )
        score = max(score, 0.9)
    ran = _since_resume(a, b, a.opt_step, (a.sched_step, b.sched_step))
    if (
        ran is not None
        and a.opt_step
        and b.opt_step is not None
        and _near(b.opt_step, ran)
        and not _near(b.opt_step, a.opt_step + ran)
    ):
        how = "run positions" if a.position is not None and b.position is not None else "schedulers"
        ev.append(
            f"B's optimizer step {b.opt_step:g} equals the steps run since the resume "
            f"({ran:g}, from the {how}) instead of A's {a.opt_step:g} + {ran:g}: the optimizer "
            "started from scratch"
        )
        score = max(score, 0.93)
    fresh = fresh_momentum(a, b)
    if fresh is not None:
        ev.append(fresh[1])
        score = max(score, fresh[0])
    if b.opt is not None and score < 0.95:
        zeros, total = zero_moments(b.opt)
        if total and zeros == total and (b.opt_step or 0) <= 1:
            ev.append(f"all {total} exp_avg tensors in B are zero, step {_fmt(b.opt_step)}")
            score = max(score, 0.95)
    if not ev:
        return None
    return Cause(
        "optimizer_moments_reset",
        "optimizer moments reset (optimizer state not restored)",
        score,
        tuple(ev),
        "Load the optimizer state (booster.load_optimizer / optimizer.load_state_dict) "
        "before training continues; Adam with fresh moments takes large steps.",
    )


# Every cause function has this frame (evidence list, score, one Cause); the tests differ.
def scheduler_cause(a: Side, b: Side) -> Cause | None:
    ev: list[str] = []
    score = 0.0
    if a.sched_values is not None and b.sched_values is None:
        ev.append("A saved an LR scheduler, B did not")
        score = 0.7
    if a.sched_step is not None and b.sched_step is not None:
        if b.sched_step < a.sched_step:
            ev.append(f"scheduler last_epoch went back: A {a.sched_step}, B {b.sched_step}")
            score = max(score, 0.85)
        ran = _since_resume(a, b, a.sched_step, (a.opt_step, b.opt_step))
        if (
            ran is not None
            and a.sched_step > 1
            and _near(b.sched_step, ran)
            and not _near(b.sched_step, a.sched_step + ran)
        ):
            ev.append(
                f"B's scheduler has taken {b.sched_step} steps = the steps run since the "
                f"resume ({ran:g}) instead of A's {a.sched_step} + {ran:g}: it restarted at "
                "the resume"
            )
            score = max(score, 0.95)
    if score and a.sched_values and b.sched_values:
        la, lb = a.sched_values.get("_last_lr"), b.sched_values.get("_last_lr")
        if la != lb:
            ra, rb = readable_pair(la, lb)
            ev.append(f"_last_lr: A {ra}, B {rb}")
    if not score:
        return None
    return Cause(
        "scheduler_not_restored",
        "LR scheduler not restored (warm-up/decay restarted)",
        score,
        tuple(ev),
        "Load the scheduler state (booster.load_lr_scheduler / scheduler.load_state_dict) "
        "after building it; ColossalAI #5151.",
    )


def _param_order(a: Side, b: Side) -> Cause | None:
    ev: list[str] = []
    score = 0.0
    if a.opt is not None and b.opt is not None and not (a.opt.flat or b.opt.flat):
        common = sorted(set(a.opt.states) & set(b.opt.states))
        shapes_a = [a.opt.state_shape(p) for p in common]
        shapes_b = [b.opt.state_shape(p) for p in common]
        moved = [
            (pid, sa, sb)
            for pid, sa, sb in zip(common, shapes_a, shapes_b, strict=True)
            if sa is not None and sb is not None and sa != sb
        ]
        if moved:
            same_set = sorted(map(str, shapes_a)) == sorted(map(str, shapes_b))
            score = 0.97 if same_set else 0.6
            for pid, sa, sb in moved[:8]:
                owner = _owner(a, sb)
                ev.append(
                    f"state {pid}: shape {list(sa)} in A, {list(sb)} in B"
                    + (f" (in A that is the shape of {owner})" if owner else "")
                )
            if not same_set:
                ev.append("the two optimizers hold different sets of shapes: another model?")
    for side, name in ((a, "A"), (b, "B")):
        info = side.opt.view.optimizer if side.opt is not None else None
        for msg in info.inconsistencies if info is not None else ():
            ev.append(f"{name}: {msg}")
            score = max(score, 0.9 if "another order" in msg else 0.5)
    if (
        b.opt is not None
        and not b.opt.flat
        and not ev
        and a.parts.models
        and b.parts.models
        and not _unrelated(a, b)  # another run's weights did not move from A's at all
    ):
        before = a.opt if a.opt is not None and not a.opt.flat else None
        misrouted = misrouted_updates(a.parts.models[0], b.parts.models[0], b.opt, before)
        if len(misrouted) >= 2:  # a reorder moves at least two parameters
            score = 0.9
            ev.append(
                f"{len(misrouted)} parameters moved from A to B the way another optimizer id's "
                "state says (same shapes, so the shapes cannot show it)"
            )
            for m in misrouted[:8]:
                ev.append(
                    f"{m.name} (id {m.pid} in the model's order) moved along state "
                    f"{m.source}'s direction (correlation {m.with_source:.2f}; with state "
                    f"{m.pid}'s: {m.with_own:.2f})"
                )
    if not ev:
        return None
    return Cause(
        "param_order_changed",
        "optimizer rebuilt with a different param order (state k belongs to another tensor)",
        score,
        tuple(ev[:12]),
        "Build the optimizer from model.parameters() in the original order (same param "
        "groups, same filtering) before loading its state.",
    )


def _owner(side: Side, shape: tuple[int, ...]) -> str | None:
    from ..validate.parts import parameter_records

    for m in side.parts.models[:1]:
        for r in parameter_records(m):
            if tuple(r.shape) == shape:
                return r.name
    return None


def _rng(a: Side, b: Side) -> Cause | None:
    if a.has_rng and b.has_rng:
        return None
    ev = []
    for side, name in ((a, "A"), (b, "B")):
        if not side.has_rng:
            ev.append(f"{name} has no RNG state (torch/cuda/numpy/python)")
        if not side.has_run_state:
            ev.append(f"{name} has no saved run position (running_states.json / meta)")
    # One side only: the save/restore code changed between the two runs (A without it could
    # not be restored; B without it comes from code that does not handle RNG). Neither side:
    # the setup never saves RNG, a choice rather than a fault of this resume.
    # Neither side: the setup never saves RNG (Lightning, most plain loops), a choice rather
    # than a fault of this resume: said, not scored as a cause.
    score = 0.6 if a.has_rng != b.has_rng else 0.1
    return Cause(
        "rng_state_missing",
        "RNG / data position not saved (dropout and data order differ after resume)",
        score,
        tuple(ev),
        "Save torch.get_rng_state(), cuda/numpy/python RNG states and the sample index with "
        "every checkpoint and restore them on resume.",
    )


def _rng_restored(va: CheckpointView, vb: CheckpointView) -> Cause | None:
    from .lineage import rng_not_restored

    why = rng_not_restored(va, vb)
    if why is None:
        return None
    return Cause(
        "rng_not_restored",
        "RNG state saved but not restored on resume (data order and augmentation differ)",
        0.85,
        (why,),
        "Restore the RNG states on resume (torch.set_rng_state / random.setstate / "
        "np.random.set_state) after seeding, or let the trainer's resume path do it.",
    )


def _unrelated(a: Side, b: Side) -> str | None:
    """Evidence that B's weights do not descend from A's (computed once, kept on B)."""
    from .lineage import unrelated_weights

    if not (a.parts.models and b.parts.models):
        return None
    if b.not_from_a is None:
        found = unrelated_weights(a.parts.models[0], b.parts.models[0])
        b.not_from_a = found if found is not None else ""
    return b.not_from_a or None


def _another_run(a: Side, b: Side) -> Cause | None:
    why = _unrelated(a, b)
    if why is None:
        return None
    return Cause(
        "resumed_from_another_run",
        "B was resumed from another run's checkpoint, not from A",
        0.85,
        (why,),
        "Check the path the resume loaded (resume_from_checkpoint / ckpt_path / load_dir): "
        "it points at another run's folder.",
    )


def _recorded_step(path: Location) -> float | None:
    side = _sides(as_view(path))[0]
    return side.position if side.position is not None else side.opt_step


def _stale_pointer(a: Side) -> Cause | None:
    from .pointer import newer_sibling

    step = a.position if a.position is not None else a.opt_step
    if step is None:
        return None
    found = newer_sibling(a.view.path, step, _recorded_step)
    if found is None:
        return None
    sib, newer = found
    from .pointer import pointed_by

    ptr = pointed_by(a.view.path)
    via = f" (named by {ptr.name})" if ptr is not None else ""
    return Cause(
        "stale_pointer",
        "resumed from a stale last/latest copy, older than the newest checkpoint",
        0.8,
        (
            f"A ({a.view.path.name}{via}) records step {step:g}, but {sib.name} beside it "
            f"records step {newer:g}: the pointer copy was not refreshed after the newest "
            f"save, so the resume repeats steps {step:g}-{newer:g}",
        ),
        "Resume from the newest step checkpoint, and refresh the last/latest copy (or link) "
        "after every save.",
    )


HYPER = ("betas", "eps", "weight_decay", "momentum", "amsgrad")


def _hyper(a: Side, b: Side) -> Cause | None:
    if a.opt is None or b.opt is None:
        return None
    ev = []
    if len(a.opt.groups) != len(b.opt.groups):
        ev.append(f"param groups: A {len(a.opt.groups)}, B {len(b.opt.groups)}")
    keys: tuple[str, ...] = (*HYPER, "initial_lr")
    if drives_momentum(a.sched_values) or drives_momentum(b.sched_values):
        keys = tuple(k for k in keys if k not in ("betas", "momentum"))  # OneCycleLR sets them
    for i, (ga, gb) in enumerate(zip(a.opt.groups, b.opt.groups, strict=False)):
        for key in keys:
            va, vb = _plain(ga.get(key)), _plain(gb.get(key))
            if va != vb:
                ra, rb = readable_pair(va, vb)
                ev.append(f"group {i} {key}: A {ra}, B {rb}")
    if not ev:
        return None
    return Cause(
        "hyperparameters_changed",
        "optimizer hyperparameters differ (config changed between runs)",
        0.6,
        tuple(ev[:12]),
        "Use the same optimizer config on resume, or expect a different trajectory.",
    )


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


# causes that are symptoms of another when both are found: another run's RNG was seeded
# otherwise too, and its steps may not follow A's
FOLDS_INTO = {"resumed_from_another_run": ("rng_not_restored", "step_mismatch_between_parts")}


def _folded(causes: list[Cause]) -> list[Cause]:
    """Each symptom cause folded into the cause that explains it (its evidence kept there)."""
    named = {c.cause: c for c in causes}
    for owner, symptoms in FOLDS_INTO.items():
        if owner not in named:
            continue
        extra = tuple(f"so: {e}" for s in symptoms if s in named for e in named[s].evidence)
        named[owner] = replace(named[owner], evidence=named[owner].evidence + extra)
        for s in symptoms:
            named.pop(s, None)
    return list(named.values())


# the findings a cause already explains when B shows them: its counter restarted at the
# resume, so B's own parts disagree (a symptom of that cause, not a second cause)
SYMPTOM_OF = {
    "scheduler_not_restored": (
        "scheduler.optimizer_step",
        "bundle.scheduler_step",
        "bundle.step_mismatch",
    ),
    "optimizer_moments_reset": (
        "bundle.optimizer_step",
        "scheduler.optimizer_step",
        "bundle.step_mismatch",
    ),
}
# a disagreement in B alone (A's parts agree) that no found cause explains: the part left
# behind names the cause (the scheduler's counter behind the others: it was not restored)
LEFT_BEHIND = (("schedul", "scheduler_not_restored"), ("optim", "optimizer_moments_reset"))
STRONG = ("bundle.step_mismatch", "bundle.epoch_mismatch")


PartFinding = tuple[str, str, str, str | None]  # side, rule, message, the cause it names

# the findings a writer's profile makes from what the run itself recorded (writer_facts): each
# says outright which part the resume left fresh, so its rule names the cause
WRITER_FACT_CAUSE = {
    "bundle.optimizer_step": "optimizer_moments_reset",
    "bundle.scheduler_step": "scheduler_not_restored",
}


def _part_findings(a: Side, b: Side) -> list[PartFinding]:
    """(side, rule, message, cause) of each disagreement between a state's own parts; cause
    is the one the finding names (the part whose counter lags, or the part the writer's
    recorded facts say the resume left fresh), None where it names none."""
    from ..validate import writer_facts
    from ..validate.bundle import check_bundle
    from ..validate.counters import weigh

    out: list[PartFinding] = []
    for side, name in ((a, "A"), (b, "B")):
        if side.view.kind != "training_state":
            continue
        for f in check_bundle(side.view.path, side.parts):
            if f.rule in STRONG or f.rule == "bundle.scheduler_step":  # (a writer's own key)
                out.append((name, f.rule, f.message, _left_behind(f.rule, f.message)))
        pairs = pair_schedulers(side.parts.optimizers, side.parts.schedulers)
        claims = position_claims(side.view.path, side.parts)
        for f in weigh(side.parts, claims, pairs):
            if f.severity != "info":
                out.append((name, f.rule, f.message, _left_behind(f.rule, f.message)))
        for f in writer_facts.check(side.parts):
            if f.severity != "info":
                out.append((name, f.rule, f.message, WRITER_FACT_CAUSE.get(f.rule)))
    return out


def _left_behind(rule: str, message: str) -> str | None:
    """The cause a step disagreement names: the part whose counter is behind."""
    import re

    behind: str | None = None
    if rule == "bundle.step_mismatch":  # "... a (...) = 4, b (...) = 2"
        claims = re.findall(r"([^,:]+?) = (\d+(?:\.\d+)?)", message)
        if len(claims) < 2:
            return None
        behind = min(claims, key=lambda c: float(c[1]))[0].lower()
    elif rule == "scheduler.optimizer_step":  # "the scheduler has taken X steps ... optimizer Y"
        found = re.search(r"scheduler has taken (\d+).*optimizer (\d+)", message)
        if found is None:
            return None
        behind = "scheduler" if int(found[1]) < int(found[2]) else "optimizer"
    elif rule == "bundle.optimizer_step":
        # counters.py: "the optimizer step N is behind: ...", "... are both behind ...",
        # "the optimizer step is N but the run position M (...)" (with the scheduler agreeing
        # or absent): the optimizer lags when N < M; both lagging, the optimizer is the one
        # whose restart makes the loss jump (the scheduler is said in the same message)
        if re.search(r"the optimizer step [\d.]+ is behind|are both behind", message):
            behind = "optimizer"
        else:
            found = re.search(r"optimizer step is ([\d.]+) but the run position (\d+)", message)
            if found is not None and float(found[1]) < float(found[2]):
                behind = "optimizer"
    elif rule == "bundle.scheduler_step":  # "<scheduler> last_epoch N but the run position M"
        found = re.search(r" (\d+)\S* but the run position (\d+)", message)
        if found is not None and int(found[1]) < int(found[2]):
            behind = "scheduler"
    if behind is None:
        return None
    return next((cause for word, cause in LEFT_BEHIND if word in behind), None)


def _from_parts(cause: str) -> Cause:
    """A cause found only from B's own parts disagreeing where A's agree (its evidence is
    added by the caller)."""
    titles = {
        "scheduler_not_restored": (
            "LR scheduler not restored (warm-up/decay restarted)",
            "Load the scheduler state after building it (the trainer's resume path does).",
        ),
        "optimizer_moments_reset": (
            "optimizer moments reset (optimizer state not restored)",
            "Load the optimizer state before training continues.",
        ),
    }
    title, hint = titles[cause]
    return Cause(cause, title, 0.8, (), hint)


def _with_part_steps(causes: list[Cause], found: list[PartFinding]) -> list[Cause]:
    """``causes`` with the parts' disagreements: one a cause explains is added to that cause
    as its symptom in B; the rest make the cause "the parts record different steps"."""
    named = {c.cause: c for c in causes}
    symptoms: dict[str, list[str]] = {}
    rest: list[str] = []
    strong = False
    in_a = {rule for side, rule, _, _ in found if side == "A"}
    b_rules = {f"{side}: {message}": rule for side, rule, message, _ in found}

    def rule_in_a(entry: str) -> bool:
        return b_rules.get(entry) in in_a

    ranked = sorted(named.values(), key=lambda c: -c.score)
    for side, rule, message, names in found:
        owner = next(
            (c.cause for c in ranked if side == "B" and rule in SYMPTOM_OF.get(c.cause, ())),
            None,
        )
        if owner is None and side == "B" and rule not in in_a:
            owner = names
            if owner is not None and owner not in named:
                named[owner] = _from_parts(owner)
                causes = [*causes, named[owner]]
        if owner is not None:
            symptoms.setdefault(owner, []).append(f"so B's own parts disagree: {message}")
        else:
            rest.append(f"{side}: {message}")
            strong = strong or rule in STRONG
    out = [
        replace(c, evidence=c.evidence + tuple(symptoms[c.cause])) if c.cause in symptoms else c
        for c in causes
    ]
    out = [c for c in out if c.evidence]
    if rest:
        # the same disagreement in A and in B is how this run saves (a counter in other units,
        # a scheduler stepped per epoch), not something the resume did: said, not scored
        habitual = all(r.split(": ", 1)[0] == "A" or rule_in_a(r) for r in rest)
        out.append(
            Cause(
                "step_mismatch_between_parts",
                "the parts of a training state record different steps"
                + (" (in A already: how this run saves them)" if habitual else ""),
                0.1 if habitual else 0.55 if strong else 0.4,
                tuple(rest),
                "Model, optimizer, scheduler and run state must come from the same save.",
            )
        )
    return out


__all__ = ["Cause", "Components", "DoctorReport", "OptimizerPart", "resume_doctor"]
