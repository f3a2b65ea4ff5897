"""The numeric area: every floating-point tensor streamed (NaN/Inf, all-zero, extreme values).
It runs ahead of the optimizer area, whose rules read its figures (``run.stats``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..area import ERR, INFO, WARN, Area, Step, declare
from ..findings import Finding

if TYPE_CHECKING:
    from ...contracts import ProgressFn
    from ...view import CheckpointView
    from ..parts import Components
    from ..run import Run


def _numeric(run: Run) -> list[Finding]:
    from .. import numeric as numeric_rules
    from ..parts import bookkeeping_names

    run.stats = {}
    bookkeeping = bookkeeping_names(run.parts)
    out = _padded_buffers(run.parts)
    for name, record, st in numeric_scan(run.parts, run.progress):
        run.stats[name] = st
        out += numeric_rules.findings_for(name, record, st, bookkeeping=name in bookkeeping)
    return out


def _padded(view: CheckpointView) -> bool:
    return view.optimizer is not None and view.optimizer.padded


def numeric_scan(parts: Components, progress: ProgressFn | None) -> Any:
    """Figures of every floating-point tensor, flat buffers with uninitialised padding left
    out (their NaN and magnitudes say nothing: see :func:`_padded_buffers`)."""
    from .. import numeric as numeric_rules

    return numeric_rules.scan([(k, v) for k, v in parts.leaves if not _padded(v)], progress)


def _padded_buffers(parts: Components) -> list[Finding]:
    out = []
    for label, view in parts.leaves:
        if _padded(view) and view.tensors:
            out.append(
                Finding(
                    "numeric.not_judged",
                    "info",
                    f"{len(view.tensors)} flat optimizer buffer(s) not scanned for NaN/Inf or "
                    "extreme values: they hold alignment padding of uninitialised memory "
                    "between the parameters' ranges, and the checkpoint does not record where "
                    "the ranges lie",
                    "Their values are checked when the optimizer is loaded back by the "
                    "training code; a dist checkpoint saved with fully_reshardable states "
                    "lists them per parameter.",
                    file=label.rstrip("/") or None,
                )
            )
    return out


# registered by its line in catalogue.AREAS; the declare(...) lines are catalogue entries, alike
# in shape by design
AREA = Area(
    name="numeric",
    rules=(
        declare("numeric.nonfinite", ERR, "NaN or Inf in a tensor"),
        declare(
            "numeric.nonfinite_run_state", INFO, "NaN or Inf in run bookkeeping (a best metric)"
        ),
        declare("numeric.all_zero", WARN, "a weight matrix that is all zero"),
        declare("numeric.extreme", WARN, "values beyond what training leaves in a weight"),
        declare("numeric.negative_running_var", ERR, "a BatchNorm running_var below zero"),
        declare(
            "numeric.norm_statistic_range", INFO, "a norm statistic outside a weight's usual range"
        ),
        declare("numeric.not_judged", INFO, "flat buffers with uninitialised padding, not scanned"),
    ),
    steps=(Step("numeric", _numeric, lambda run: run.numeric, before="optimizer"),),
)
