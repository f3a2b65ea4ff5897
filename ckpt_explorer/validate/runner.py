"""``validate_checkpoint``: run the steps of every area (``catalogue.BEFORE_VIEW``, then
``AFTER_VIEW``) that apply and collect the findings."""

from __future__ import annotations

from pathlib import Path

from ..api import as_view
from ..contracts import ProgressFn
from ..errors import CkptExplorerError
from ..io.location import Location, as_location
from ..view import CheckpointView
from .area import Step
from .catalogue import AFTER_VIEW, AREAS, BEFORE_VIEW
from .findings import Finding, ValidationReport
from .parts import collect
from .run import Run


def validate_checkpoint(
    path_or_view: str | Path | Location | CheckpointView,
    *,
    model: str | Path | Location | CheckpointView | None = None,
    numeric: bool = True,
    hf_load: bool = False,
    progress: ProgressFn | None = None,
) -> ValidationReport:
    """Validate a model, optimizer or training-state checkpoint.

    Args:
        path_or_view: a checkpoint path of any known family, or an open view.
        model: a model checkpoint for an optimizer saved on its own (param count, shapes).
        numeric: stream every floating-point tensor (NaN/Inf, all-zero, extreme values,
            negative ``exp_avg_sq``); False reads headers and indexes only.
        hf_load: also load HF folders with transformers ``from_pretrained`` on CPU.
        progress: called with :class:`~ckpt_explorer.contracts.Progress` events during the
            numeric scan (stage ``"scan"``, tensor bytes read, the tensor being read).

    Returns:
        A :class:`ValidationReport`; ``report.ok`` is False when any error-level finding.

    Raises:
        CkptExplorerError: the input cannot be read and no rule explains why.

    Example:
        >>> report = validate_checkpoint("run/epoch-1_step-3000")   # doctest: +SKIP
        >>> report.to_frame()[["rule", "severity", "message"]]      # doctest: +SKIP
    """
    label = str(getattr(path_or_view, "path", path_or_view))
    model_view = as_view(model) if model is not None else None
    if isinstance(path_or_view, CheckpointView):
        view = as_view(path_or_view, model_view)
        given: CheckpointView | None = view
        root = view.path
    else:
        given, root = None, as_location(path_or_view)
        if not root.exists():
            raise CkptExplorerError(root, "a checkpoint file or folder", "nothing at that path")
    run = Run(root, given, model_view, numeric, hf_load, progress, view=given)
    ran = _run(run, BEFORE_VIEW)  # every pickle judged before anything is opened
    if run.view is None:
        try:
            run.view = as_view(root, model_view)
        except CkptExplorerError as e:
            if any(f.severity == "error" for f in run.findings):
                run.findings.append(
                    Finding("integrity.unopenable", "error", e.one_line(), e.hint, file=e.path)
                )
                return ValidationReport(label, run.findings, _checked(ran))
            raise
    run.parts = collect(run.view, model_view)
    ran |= _run(run, AFTER_VIEW)
    report = ValidationReport(label, run.findings, _checked(ran))
    if run.stats is not None:
        report.stats = {k: v.to_dict() for k, v in run.stats.items()}
    return report


def _run(run: Run, steps: tuple[Step, ...]) -> set[str]:
    ran = set()
    for step in steps:
        if step.when(run):
            ran.add(step.area)
            run.findings += step.run(run)
    return ran


def _checked(ran: set[str]) -> list[str]:
    return [a for a in AREAS if a in ran]
