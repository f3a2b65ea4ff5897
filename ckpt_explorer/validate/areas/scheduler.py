"""The scheduler area: each scheduler against its optimizer, and the optimizer's, scheduler's and
run position's counters weighed together."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..area import ERR, INFO, WARN, Area, Step, declare

if TYPE_CHECKING:
    from ..findings import Finding
    from ..run import Run


def _scheduler(run: Run) -> list[Finding]:
    from .. import writer_facts
    from ..scheduler import check_scheduler
    from ..scheduler_pairing import pair_schedulers

    run.pairs = pair_schedulers(run.parts.optimizers, run.parts.schedulers)
    out: list[Finding] = []
    for opt_part, sched in run.pairs:
        if sched is not None:
            checked = check_scheduler(sched, opt_part)
            out += writer_facts.handed_over(sched, run.parts, checked)
    return out


def _counters(run: Run) -> list[Finding]:
    """The optimizer's, scheduler's and run position's counters weighed together."""
    from .. import counters
    from ..bundle import position_claims

    parts = run.parts
    run_epoch = next(
        (rs.values.get("epoch") for rs in parts.run_states if "epoch" in rs.values), None
    )
    ts = run.training_state
    claims = position_claims(run.opened.path, parts) if ts else {}
    return counters.weigh(parts, claims, run.pairs, run_epoch, training_state=ts)


# registered by its line in catalogue.AREAS; the declare(...) lines are catalogue entries, alike
# in shape by design
AREA = Area(
    name="scheduler",
    rules=(
        declare("scheduler.step_count", (WARN, INFO), "the scheduler's step counters disagree"),
        declare("scheduler.last_lr", WARN, "_last_lr disagrees with the optimizer's lr"),
        declare("scheduler.base_lrs", WARN, "base_lrs disagree with the groups' initial_lr"),
        declare(
            "scheduler.group_count",
            ERR,
            "the scheduler has another number of groups than its optimizer",
        ),
        declare(
            "scheduler.optimizer_step",
            WARN,
            "the scheduler's steps and the optimizer's step disagree",
        ),
        declare(
            "scheduler.per_process_steps", INFO, "accelerate steps the scheduler once per process"
        ),
    ),
    steps=(Step("scheduler", _scheduler), Step("scheduler", _counters)),
)
