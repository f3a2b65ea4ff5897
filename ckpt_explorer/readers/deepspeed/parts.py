"""The logical parts of a DeepSpeed tag folder, built from the per-file views.

- model states: ``module.<name>`` with each parameter's true shape (``param_shapes`` /
  ``frozen_param_shapes``) and the module's dtype. Under ZeRO-3 the file holds only empty
  placeholders: the record then loads from the fp32 flat partitions of the optimizer files
  (trainable, cast to the module dtype) or from ``frozen_param_fragments`` (frozen); when
  neither is readable it has no loader (it never pretends to load).
- optimizer states: the flat partitions under their own names (``flat`` in the sense of
  readers/state_map.py), plus, on rank 0's file, one ``state.<id>.<name>`` view per parameter
  (a slice of the flat partition, the parameter's shape) with an :class:`OptimizerInfo` whose
  ids are those of :mod:`.zero_layout` and whose names are ``recorded`` from ``param_shapes``.
- ``<model states>:optimizer`` (ZeRO-0 only): the client optimizer's torch state_dict.
- ``<model states>:lr_scheduler``: the scheduler state (kind ``scheduler``), values as saved
  (torch schedulers: ``last_epoch``, ``base_lrs``, ...; DeepSpeed's own WarmupLR & co.:
  ``last_batch_iteration``, which is the number of steps taken minus one).
- ``<model states>:run_state``: ``global_steps``, ``global_samples``, ``skipped_steps``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Any

from ...types import Detection, OptimizerInfo, ParamName, TensorRecord
from ...view import CheckpointView
from ..optimizer_info import optimizer_info_from_tree
from .zero_layout import (
    STATE_PREFIX,
    LayoutError,
    ZeroLayout,
    byte_offset,
    enum_value,
    slice_read_values,
)

ENGINE_COUNTERS = ("global_steps", "global_samples", "skipped_steps")  # the engine's run counters
ITEMSIZE = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}


def flat_optimizer_info(view: CheckpointView) -> OptimizerInfo:
    """An optimizer-states file read alone: its param groups with their hyperparameters and
    one id per flat partition (a group's, or a ZeRO-3 sub-group's), no parameter names."""
    stage = enum_value(view.values.get("optimizer_state_dict.zero_stage"))
    prefix = STATE_PREFIX.get(stage, "optimizer_state_dict.base_optimizer_state.")
    records = [
        replace(r, name=r.name[len(prefix) :]) for r in view.tensors if r.name.startswith(prefix)
    ]
    values = {k[len(prefix) :]: v for k, v in view.values.items() if k.startswith(prefix)}
    return optimizer_info_from_tree(records, values)


def _numel(shape: Any) -> int:
    return math.prod(int(d) for d in shape)


def _true_shapes(model: CheckpointView) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for key in ("param_shapes", "frozen_param_shapes"):
        found = model.values.get(key)
        groups = found if isinstance(found, list | tuple) else [found]
        for g in groups:
            if isinstance(g, dict):
                out.update({str(n): tuple(int(d) for d in s) for n, s in g.items()})
    return out


def _frozen_record(
    name: str,
    shape: tuple[int, ...],
    placeholder: TensorRecord,
    models: list[tuple[CheckpointView, dict[str, TensorRecord]]],
) -> TensorRecord:
    """A frozen ZeRO-3 parameter rebuilt from every rank's ``frozen_param_fragments``."""
    fragments: list[tuple[CheckpointView, TensorRecord, int, int]] = []
    for m, by_name in models:
        rec = by_name.get(f"frozen_param_fragments.{name}")
        if rec is None or len(rec.shape) != 1:
            fragments = []
            break
        fragments.append((m, rec, 0, rec.shape[0]))
    n = _numel(shape)
    if sum(f[3] for f in fragments) < n:
        return _unloadable(placeholder, shape)
    pieces, left = [], n
    for view, rec, start, count in fragments:
        take = min(count, left)
        if take:
            pieces.append((view, rec, start, take))
        left -= take
    first = pieces[0][1]
    return TensorRecord(
        placeholder.name,
        placeholder.dtype,
        shape,
        n * ITEMSIZE.get(placeholder.dtype, 4),
        first.file,
        byte_offset(first, 0, ITEMSIZE.get(first.dtype, 4))
        if len(pieces) == 1 and first.dtype == placeholder.dtype
        else None,
        None,
        slice_read_values(pieces, shape, placeholder.dtype),
    )


def _unloadable(placeholder: TensorRecord, shape: tuple[int, ...]) -> TensorRecord:
    n = _numel(shape)
    return replace(
        placeholder,
        shape=shape,
        nbytes=n * ITEMSIZE.get(placeholder.dtype, 4),
        offset=None,
        storage_key=None,
        read_values=None,
    )


def model_records(
    model: CheckpointView, layout: ZeroLayout | None, models: list[CheckpointView]
) -> tuple[list[TensorRecord], list[str]]:
    """The model-states file's records with placeholders replaced by the true parameters, and
    notes on what could not be rebuilt."""
    shapes = _true_shapes(model)
    slots = {s.name: s for s in layout.slots} if layout is not None else {}
    shared = model.values.get("shared_params")
    aliases = {str(k): str(v) for k, v in shared.items()} if isinstance(shared, dict) else {}
    out: list[TensorRecord] = []
    notes: list[str] = []
    built: dict[str, TensorRecord] = {}
    indexed: list[tuple[CheckpointView, dict[str, TensorRecord]]] = []
    for r in model.tensors:
        name = r.name.removeprefix("module.")
        owner = aliases.get(name, name)
        shape = shapes.get(owner)
        if not r.name.startswith("module.") or shape is None or tuple(r.shape) == shape:
            out.append(r)
            continue
        if owner in built:
            out.append(replace(built[owner], name=r.name))
            continue
        slot = slots.get(owner)
        if slot is not None and layout is not None:
            pieces = layout.pieces_of(slot, layout.fp32_name)
        else:
            pieces = None
        if slot is None:
            if not indexed:
                indexed = [(m, {t.name: t for t in m.tensors}) for m in models]
            rec = _frozen_record(owner, shape, r, indexed)
        elif pieces is None:
            rec = _unloadable(r, shape)
        else:
            first = pieces[0][1]
            same = len(pieces) == 1 and first.dtype == r.dtype
            rec = TensorRecord(
                r.name,
                r.dtype,
                shape,
                _numel(shape) * ITEMSIZE.get(r.dtype, 4),
                first.file,
                byte_offset(first, pieces[0][2], ITEMSIZE.get(first.dtype, 4)) if same else None,
                None,
                slice_read_values(pieces, shape, r.dtype),
            )
        if rec.read_values is None:
            notes.append(f"{name}: not in this folder's files (shape from param_shapes only)")
        built[owner] = rec
        out.append(rec)
    return out, notes


def _state_key(layout: ZeroLayout, state: str, source: int) -> str:
    return layout.state_name(source, state)


def optimizer_part(view: CheckpointView, layout: ZeroLayout, source: str) -> CheckpointView:
    """Rank 0's optimizer-states view with one ``state.<id>.<name>`` view per parameter."""
    records: list[TensorRecord] = []
    values: dict[str, Any] = {}
    state_names: dict[int, list[str]] = {}
    group_states = [layout.state_names(g) for g in range(len(layout.groups))]
    for slot in layout.slots:
        for state in group_states[slot.group]:
            key = f"state.{slot.pid}.{state}"
            src = layout.group_sources[slot.group][0]
            whole = layout.state_name(src, state)
            if whole in view.values:
                values[key] = view.values[whole]
                state_names.setdefault(slot.pid, []).append(state)
                continue
            rec = layout.by_name[0].get(whole)
            if rec is not None and not rec.shape:  # one scalar per group (step)
                records.append(replace(rec, name=key))
                state_names.setdefault(slot.pid, []).append(state)
                continue
            pieces = layout.pieces_of(slot, functools.partial(_state_key, layout, state))
            if pieces is None:
                continue
            first = pieces[0][1]
            records.append(
                TensorRecord(
                    key,
                    first.dtype,
                    slot.shape,
                    slot.numel * first.nbytes // max(first.numel, 1),
                    first.file,
                    byte_offset(first, pieces[0][2], first.nbytes // max(first.numel, 1))
                    if len(pieces) == 1
                    else None,
                    first.storage_key if len(pieces) == 1 else None,
                    slice_read_values(pieces, slot.shape),
                )
            )
            state_names.setdefault(slot.pid, []).append(state)
    groups = []
    for g, group in enumerate(layout.groups):
        groups.append({**group, "params": [s.pid for s in layout.slots if s.group == g]})
    info = OptimizerInfo(
        param_groups=tuple(groups),
        state_ids=tuple(sorted(state_names)),
        state_names={k: tuple(v) for k, v in sorted(state_names.items())},
        param_names={s.pid: s.name for s in layout.slots},
        name_source=f"param_shapes in {source}",
        names={s.pid: ParamName(s.name, "recorded") for s in layout.slots},
    )
    return CheckpointView(
        view.path,
        view.detection,
        view.files,
        view.tensors + tuple(records),
        {**view.values, **values},
        view.parts,
        info,
        view.warnings,
    )


def split_model_states(
    model: CheckpointView, records: list[TensorRecord], rel: str
) -> dict[str, CheckpointView]:
    """The model-states file as parts: the model (placeholders replaced), and where present
    the ZeRO-0 client optimizer, the LR scheduler and the run position."""
    parts: dict[str, CheckpointView] = {}
    values = dict(model.values)
    optim = [r for r in records if r.name.startswith("optimizer.")]
    optim_values = {k: v for k, v in values.items() if k.startswith("optimizer.")}
    is_torch_optim = "optimizer.param_groups" in optim_values
    kept = [r for r in records if not (is_torch_optim and r.name.startswith("optimizer."))]
    if is_torch_optim:
        values = {k: v for k, v in values.items() if not k.startswith("optimizer.")}
    parts[rel] = CheckpointView(
        model.path, model.detection, model.files, tuple(kept), values, None, None, model.warnings
    )
    name = model.path.name
    if is_torch_optim:
        o_recs = tuple(replace(r, name=r.name.removeprefix("optimizer.")) for r in optim)
        o_vals = {k.removeprefix("optimizer."): v for k, v in optim_values.items()}
        parts[f"{rel}:optimizer"] = CheckpointView(
            model.path,
            Detection(
                str(model.path),
                model.family,
                "optimizer",
                (f"'optimizer' in {name}: the client optimizer's state_dict (ZeRO stage 0)",),
                "optimizer state_dict",
            ),
            (),  # a part of the model-states file, counted there
            o_recs,
            o_vals,
            optimizer=optimizer_info_from_tree(o_recs, o_vals),
        )
    sched = model.values.get("lr_scheduler")
    if isinstance(sched, dict) and sched:
        s_recs = tuple(
            replace(r, name=r.name.removeprefix("lr_scheduler."))
            for r in records
            if r.name.startswith("lr_scheduler.")
        )
        own = "last_batch_iteration" in sched and "last_epoch" not in sched
        parts[f"{rel}:lr_scheduler"] = CheckpointView(
            model.path,
            Detection(
                str(model.path),
                model.family,
                "scheduler",
                (f"'lr_scheduler' in {name}",),
                "DeepSpeed LR scheduler (last_batch_iteration = steps taken - 1)"
                if own
                else "LR scheduler state",
            ),
            (),  # a part of the model-states file, counted there
            s_recs,
            {str(k): v for k, v in sched.items()},
        )
    run = {k: values[k] for k in ENGINE_COUNTERS if k in values}
    if run:
        parts[f"{rel}:run_state"] = CheckpointView(
            model.path,
            Detection(
                str(model.path),
                model.family,
                "running_state",
                (f"{', '.join(run)} in {name}",),
                "DeepSpeed run position",
            ),
            (),  # a part of the model-states file, counted there
            (),
            run,
        )
    return parts


def layout_or_note(
    model: CheckpointView, ranks: list[CheckpointView]
) -> tuple[ZeroLayout | None, str | None]:
    from .zero_layout import zero_layout

    if not ranks or model.values.get("param_shapes") is None:
        return None, None
    try:
        return zero_layout(model, ranks), None
    except LayoutError as e:
        return None, f"ZeRO partitions not mapped to parameters: {e}"
