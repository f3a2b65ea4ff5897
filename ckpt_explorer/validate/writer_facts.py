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
  (:func:`counts_epochs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .findings import Finding
from .parts import Components, ValuesPart


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


def check(parts: Components) -> list[Finding]:
    facts = parts.writer.facts()
    return _not_restored(parts, facts) + _epoch_schedulers(parts, facts)


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
