"""The bundle area: the parts of a training state and their counters."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..area import ERR, INFO, WARN, Area, Step, declare

if TYPE_CHECKING:
    from ..findings import Finding
    from ..run import Run


def _bundle(run: Run) -> list[Finding]:
    from .. import bundle, writer_facts

    return bundle.check_bundle(run.opened.path, run.parts) + writer_facts.check(run.parts)


# registered by its line in catalogue.AREAS; the declare(...) lines are catalogue entries, alike
# in shape by design
AREA = Area(
    name="bundle",
    rules=(
        declare("bundle.missing_model", ERR, "a training state without model weights"),
        declare(
            "bundle.missing_optimizer", (WARN, INFO), "a training state without an optimizer state"
        ),
        declare(
            "bundle.missing_scheduler", (WARN, INFO), "a training state without a scheduler state"
        ),
        declare("bundle.missing_rng", (WARN, INFO), "a training state without RNG states"),
        declare(
            "bundle.missing_run_state", (WARN, INFO), "a training state without its run position"
        ),
        declare("bundle.step_mismatch", ERR, "the parts record different steps"),
        declare("bundle.epoch_mismatch", ERR, "the parts record different epochs"),
        declare(
            "bundle.optimizer_step",
            (ERR, WARN, INFO),
            "the optimizer's step against the run position",
        ),
        declare("bundle.scheduler_step", WARN, "the scheduler's steps against the run position"),
        declare(
            "bundle.stale_copy", WARN, "a copy (last.ckpt) older than the newest save beside it"
        ),
        declare("bundle.stale_pointer", WARN, "a pointer file (latest) naming an older save"),
    ),
    steps=(Step("bundle", _bundle, lambda run: run.training_state),),
)
