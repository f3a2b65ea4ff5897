"""Findings from what a writer profile derives from the files (``ProfileMatch.facts()``).

Two facts a profile may state, each from values the writer itself recorded:

- ``not_restored``: the parts the run's recorded arguments say its resume left fresh (timm's
  ``--resume`` with ``--no-resume-opt``: the optimizer and the loss scaler), with
  ``not_restored_why`` quoting the arguments. Fresh Adam moments and a restarted step make the
  first steps after the resume too large: a warning, since the flag may be meant for a
  fine-tune from the weights.
- ``epoch_schedulers`` and ``epochs_done``: LR schedulers that step once per epoch one after
  the other (torch SWA: the main scheduler until ``swa_start``, then ``SWALR``) have together
  taken one step per epoch; fewer (or more) means one restarted on resume. Each such
  scheduler counts epochs, not optimizer steps: the step counters leave it out
  (:func:`counts_epochs`). In such a loop an averaged model (``AveragedModel``) that has
  averaged more updates than there were epochs is updated per optimizer step (an EMA): its
  ``n_averaged`` counts optimizer steps, so an optimizer far behind it was not restored (a
  GradScaler skips a step, not the EMA update, at each backoff: that many are allowed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..io.raw_values import record_scalar
from .findings import Finding
from .parts import Components, ValuesPart
from .scheduler import optimizer_step

INIT_SCALE = 2.0**16  # GradScaler's default init_scale


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def counts_epochs(sched: ValuesPart, parts: Components) -> bool:
    """The writer's profile says this scheduler steps once per epoch."""
    name = sched.label.rstrip("./") or sched.file
    if parts.writer.profile.unit(f"{name}.last_epoch") == "epochs":
        return True
    facts = parts.writer.facts()
    schedulers = facts.get("epoch_schedulers")
    return isinstance(schedulers, dict) and name in schedulers


def handed_over(sched: ValuesPart, parts: Components, found: list[Finding]) -> list[Finding]:
    """``found`` without ``scheduler.last_lr`` for a scheduler of a hand-over pair (SWA's main
    scheduler after ``swa_start``, SWALR before it): only the one stepping sets the lr, the
    other's ``_last_lr`` is where it stopped, by design."""
    schedulers = parts.writer.facts().get("epoch_schedulers")
    if not isinstance(schedulers, dict) or len(schedulers) < 2 or not counts_epochs(sched, parts):
        return found
    return [f for f in found if f.rule != "scheduler.last_lr"]


def check(parts: Components) -> list[Finding]:
    facts = parts.writer.facts()
    return _not_restored(parts, facts) + _epoch_schedulers(parts, facts) + _averagers(parts, facts)


def _not_restored(parts: Components, facts: Mapping[str, Any]) -> list[Finding]:
    roles = facts.get("not_restored")
    if not isinstance(roles, tuple | list) or "optimizer" not in roles or not parts.optimizers:
        return []
    why = facts.get("not_restored_why") or "the recorded arguments"
    fresh = ", ".join(str(r) for r in roles)
    return [
        Finding(
            "bundle.optimizer_step",
            "warning",
            f"the run was resumed without its optimizer state ({why}): {fresh} started "
            f"afresh, so the optimizer's moments and step count only the steps since that "
            f"resume ({parts.writer.profile.title})",
            "Resume with the optimizer (drop --no-resume-opt) to continue a run; keep it only "
            "for a fine-tune that starts from the weights.",
            file=parts.optimizers[0].label.rstrip("/.") or None,
        )
    ]


def _epoch_schedulers(parts: Components, facts: Mapping[str, Any]) -> list[Finding]:
    steps = facts.get("epoch_schedulers")
    epoch = _int(facts.get("epochs_done"))
    if not isinstance(steps, dict) or epoch is None or not steps:
        return []
    counts = {k: _int(v) for k, v in steps.items()}
    if any(v is None for v in counts.values()):
        return []
    total = sum(v for v in counts.values() if v is not None)
    if total in (epoch, epoch + 1):  # the epoch saved as an index or as a count
        return []
    shown = " + ".join(f"{k} last_epoch {v}" for k, v in counts.items())
    return [
        Finding(
            "bundle.scheduler_step",
            "warning",
            f"the per-epoch schedulers have stepped {total} times ({shown}) but the run is at "
            f"epoch {epoch}: they step once per epoch one after the other, so one of them "
            "restarted: it was not restored on resume",
            "Load every scheduler's state when resuming (the main scheduler as well as the "
            "SWA scheduler): a restarted main schedule changes the LR before swa_start and "
            "the averaged weights after it.",
            file=min(counts, key=lambda k: counts[k] or 0),
        )
    ]


def _skipped_allowance(parts: Components) -> int:
    """Optimizer steps a GradScaler may have skipped: one per backoff below its default
    initial scale (its saved ``scale``), plus one."""
    for value in parts.writer.evidence.values.values():
        if isinstance(value, dict) and "growth_interval" in value and "scale" in value:
            scale = value["scale"]
            if isinstance(scale, int | float) and 0 < scale < INIT_SCALE:
                return int(math.log2(INIT_SCALE / scale)) + 1
    return 1


def _averagers(parts: Components, facts: Mapping[str, Any]) -> list[Finding]:
    epoch = _int(facts.get("epochs_done"))
    if epoch is None or not isinstance(facts.get("epoch_schedulers"), dict):
        return []
    opt = next((o for o in parts.optimizers if not o.flat), None)
    step = optimizer_step(opt) if opt is not None else None
    if opt is None or step is None:
        return []
    allowed = _skipped_allowance(parts)
    out = []
    for model in parts.models:
        record = next((r for r in model.records if r.name == "n_averaged"), None)
        n = record_scalar(record) if record is not None else None
        if n is None or n <= epoch + 1 or n - step <= allowed:
            continue  # per-epoch (SWA), or in step with the optimizer
        out.append(
            Finding(
                "bundle.optimizer_step",
                "warning",
                f"{model.label}n_averaged is {n:g}, more than the {epoch + 1} epochs: it "
                f"averages once per optimizer step, but the optimizer step is {step:g}: the "
                "optimizer counts only the steps since a resume that did not restore it",
                "Load the optimizer state when resuming: fresh Adam moments make the first "
                "steps after the resume too large.",
                file=opt.label.rstrip("/.") or None,
            )
        )
    return out
