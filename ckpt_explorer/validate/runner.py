"""``validate_checkpoint``: run every rule that applies and collect the findings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..api import as_view
from ..contracts import ProgressFn
from ..errors import CkptExplorerError
from ..io.location import Location, as_location
from ..readers.part_pairing import paired
from ..security import security_findings
from ..security.severity import weigh_refusals
from ..view import CheckpointView
from . import bundle, config, counters, integrity, optimizer, scheduler, writer_facts
from . import numeric as numeric_rules
from .area import Step
from .catalogue import AREAS, with_steps
from .findings import Finding, ValidationReport
from .loadable_rules import check_loadable
from .parts import Components, ModelPart, OptimizerPart, bookkeeping_names, collect
from .quantized import QUANT_KEY, check_quantized
from .run import Run
from .scheduler_pairing import pair_schedulers


def _integrity_of_parts(view: CheckpointView, seen: set[Location]) -> list[Finding]:
    out: list[Finding] = []
    for name, part in view.parts.items():
        if part.path in seen:
            continue
        seen.add(part.path)
        if part.path.is_dir() or part.path.name.endswith(".json"):
            out += integrity.check_path(part.path, label=f"{name}/")
        out += _integrity_of_parts(part, seen)
    return out


def _unrecognised_children(view: CheckpointView) -> list[Finding]:
    """Children of a training-state folder that look like checkpoint files but are broken
    (the bundle reader leaves out what it cannot read, e.g. a truncated optimizer file)."""
    if not view.traits.part_files or not view.path.is_dir():
        return []
    from ..api import detect_format
    from ..errors import FormatDetectionError, TruncatedFileError
    from ..readers.bundle import IGNORED

    taken = {p.path.resolve() for p in view.parts.values()}
    out = []
    for child in sorted(view.path.iterdir()):
        if child.name.startswith(".") or child.name in IGNORED or child.resolve() in taken:
            continue
        try:
            detect_format(child)
        except FormatDetectionError:
            continue  # not a checkpoint file at all (README, tokenizer, scripts)
        except TruncatedFileError as e:
            out.append(
                Finding(
                    "integrity.truncated",
                    "error",
                    f"{child.name} is truncated: expected {e.expected}, found {e.found}",
                    "Copy the file again from its source; the training state is incomplete.",
                    file=child.name,
                )
            )
        except CkptExplorerError as e:
            out.append(
                Finding(
                    "integrity.unreadable_part",
                    "error",
                    f"{child.name} beside the training state cannot be read: {e.found}",
                    e.hint or "Copy it again or re-save; the training state is incomplete.",
                    file=child.name,
                )
            )
    return out


def _pick_model(parts: Components) -> ModelPart | None:
    ordered = [m for m in parts.models if m.ordered]
    candidates = ordered or parts.models
    return candidates[0] if candidates else None


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


def _security(run: Run) -> list[Finding]:
    return security_findings(run.root)


def _integrity(run: Run) -> list[Finding]:
    if run.given is not None and not run.root.is_dir():
        return []  # an open view of a file: its integrity is its reader's
    return integrity.check_path(run.root)


def _loadable(run: Run) -> list[Finding]:
    return check_loadable(run.root)  # each real loader's own resolution, from the files


def _weigh_refusals(run: Run) -> list[Finding]:
    run.findings[:] = weigh_refusals(run.findings, run.opened)
    return []


def _integrity_of_view(run: Run) -> list[Finding]:
    view = run.opened
    return _integrity_of_parts(view, {view.path}) + _unrecognised_children(view)


def _quantized(run: Run) -> list[Finding]:
    return check_quantized(run.opened)


def _config(run: Run) -> list[Finding]:
    return [f for m in run.parts.models for f in config.check_model(m)]


def _numeric(run: Run) -> list[Finding]:
    run.stats = {}
    bookkeeping = bookkeeping_names(run.parts)
    out = _padded_buffers(run.parts)
    for name, record, st in numeric_scan(run.parts, run.progress):
        run.stats[name] = st
        out += numeric_rules.findings_for(name, record, st, bookkeeping=name in bookkeeping)
    return out


def _optimizer(run: Run) -> list[Finding]:
    parts = run.parts
    the_model = _pick_model(parts)
    # torch schedulers (base_lrs) put initial_lr in the groups; DeepSpeed's WarmupLR & co. do not
    sets_initial_lr = any("base_lrs" in s.values for s in parts.schedulers)
    out: list[Finding] = []
    for opt in parts.optimizers:
        model = _model_of(opt, parts, the_model)
        out += optimizer.check_optimizer(opt, model, sets_initial_lr, run.stats)
    return out


def _scheduler(run: Run) -> list[Finding]:
    run.pairs = pair_schedulers(run.parts.optimizers, run.parts.schedulers)
    out: list[Finding] = []
    for opt_part, sched in run.pairs:
        if sched is not None:
            checked = scheduler.check_scheduler(sched, opt_part)
            out += writer_facts.handed_over(sched, run.parts, checked)
    return out


def _counters(run: Run) -> list[Finding]:
    """The optimizer's, scheduler's and run position's counters weighed together."""
    parts = run.parts
    run_epoch = next(
        (rs.values.get("epoch") for rs in parts.run_states if "epoch" in rs.values), None
    )
    ts = run.training_state
    claims = bundle.position_claims(run.opened.path, parts) if ts else {}
    return counters.weigh(parts, claims, run.pairs, run_epoch, training_state=ts)


def _bundle(run: Run) -> list[Finding]:
    return bundle.check_bundle(run.opened.path, run.parts) + writer_facts.check(run.parts)


# The steps in the order their findings are reported, of the areas catalogue.py lists; the
# areas registered from a module of their own (catalogue.AREA_MODULES) add theirs.
BEFORE_VIEW: tuple[Step, ...] = with_steps(
    (
        Step("security", _security, before_view=True),
        Step("integrity", _integrity, before_view=True),
        Step("loadable", _loadable, lambda run: run.root.exists(), before_view=True),
    ),
    before_view=True,
)
AFTER_VIEW: tuple[Step, ...] = with_steps(
    (
        Step("security", _weigh_refusals),
        Step("integrity", _integrity_of_view),
        Step("quantized", _quantized, lambda run: QUANT_KEY in run.opened.values),
        Step("config", _config),
        Step("numeric", _numeric, lambda run: run.numeric),
        Step("optimizer", _optimizer),
        Step("scheduler", _scheduler),
        Step("scheduler", _counters),
        Step("bundle", _bundle, lambda run: run.training_state),
    ),
    before_view=False,
)


def _padded(view: CheckpointView) -> bool:
    return view.optimizer is not None and view.optimizer.padded


def numeric_scan(parts: Components, progress: ProgressFn | None) -> Any:
    """Figures of every floating-point tensor, flat buffers with uninitialised padding left
    out (their NaN and magnitudes say nothing: see :func:`_padded_buffers`)."""
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


def _model_of(opt: OptimizerPart, parts: Components, default: ModelPart | None) -> ModelPart | None:
    """The model ``opt`` trains: accelerate's optimizer_k.bin pairs with model_k."""
    own = paired(opt.label, [m.label for m in parts.models])
    return next((m for m in parts.models if m.label == own), default)
