"""A checkpoint's own record, read from its listing: steps, groups, scheduler, parts, tensors.

Only the package's readers are used (``open_checkpoint``, the view's roles and slots, and the
components of validate): steps come from trainer_state.json, running_states.json / meta / DeepSpeed ``global_steps``
(``validate.bundle.position_claims``), else the optimizer's ``step``, else the name (marked).
"""

from __future__ import annotations

import re
from typing import Any

from ..readers.roles import MOMENTS
from ..types import TensorRecord
from ..validate.bundle import position_claims
from ..validate.parts import (
    Components,
    OptimizerPart,
    bookkeeping_names,
    collect,
    model_tensors_by_suffix,
)
from ..validate.scheduler import effective_step, optimizer_step
from ..view import CheckpointView
from .discover import Candidate
from .summaries import CheckpointSummary, TensorFacts

HYPER_KEYS = ("lr", "initial_lr", "betas", "eps", "weight_decay", "momentum", "amsgrad")
_GROUP_VALUE = re.compile(r"(?:^|[/.])param_groups\.")
# Positions recorded by the run, strongest first (the folder name is not a record).
_SOURCES = ("trainer_state.json", "running_states", "meta", "run_state", "global_steps")


def _plain(v: Any) -> Any:
    if isinstance(v, tuple | list):
        return [_plain(x) for x in v]
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return None


def recorded_step(claims: dict[str, int]) -> tuple[int | None, str]:
    recorded = {k: v for k, v in claims.items() if not k.startswith("folder name")}
    for source in _SOURCES:
        for k, v in recorded.items():
            if source in k:
                return v, k
    if recorded:
        k = next(iter(recorded))
        return recorded[k], k
    return None, ""


# A checkpoint's part: (label prefixing its tensor names, view, parts found in it)
Part = tuple[str, CheckpointView, Components]
_EMA_NAME = re.compile(r"(?:^|[-_.])(?:ema|swa|avg|average|averaged)(?=$|[-_.\d])")


def is_ema_copy(label: str, view: CheckpointView | None = None) -> bool:
    """An averaged copy of the model: AveragedModel's ``n_averaged``, a folder the reader
    calls an EMA copy (diffusers' ``EMAModel.save_pretrained``) or an EMA name (``ema_N.pt``,
    ``ema_0.9999_N.pt``, timm's ``state_dict_ema``)."""
    if view is not None and ("n_averaged" in view or view.traits.ema_copy):
        return True
    return _EMA_NAME.search(label.rstrip("/.").lower()) is not None


def main_part(parts: list[Part]) -> Part | None:
    """The part holding the model (not an EMA copy); None when no part does."""
    for part in parts:
        if part[2].models and not is_ema_copy(part[0], part[1]):
            return part
    return None


def ema_labels(comps: Components) -> tuple[str, ...]:
    """Labels of the EMA copies saved beside the model in one checkpoint (timm's
    ``state_dict_ema.`` beside ``state_dict.``); none when no other model part is there."""
    ema = tuple(m.label for m in comps.models if m.label and is_ema_copy(m.label))
    return ema if len(ema) < len(comps.models) else ()


def recorded_epoch(comps: Components) -> int | None:
    """The ``epoch`` a run state of the checkpoint records (timm's ``epoch``, meta.pt's)."""
    for rs in comps.run_states:
        v = rs.values.get("epoch")
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def extra_optimizer_views(view: CheckpointView, comps: Components) -> list[OptimizerPart]:
    """Optimizer parts whose tensors the top view does not list (DeepSpeed optim files)."""
    out = []
    for opt in comps.optimizers:
        names = [opt.label + r.name for recs in opt.states.values() for r in recs.values()]
        if opt.view is not view and names and not any(n in view for n in names):
            out.append(opt)
    return out


def state_records(opt: OptimizerPart) -> list[TensorRecord]:
    """The per-parameter state tensors of an optimizer part (not DeepSpeed's flat groups)."""
    return [r for recs in opt.states.values() for r in recs.values()]


def optimizer_states(comps: Components) -> dict[str, tuple[str | None, str, int | None]]:
    """Tensor name in the top view -> (parameter, state name, group) for the per-parameter
    states the parts finder found (names the diff's ``[part/]state.<id>.<x>`` rule misses:
    an optimizer nested under a key of a torch file or a DCP checkpoint). The parameter is
    the model tensor it resolves to (see :func:`model_tensors_by_suffix`), else the
    optimizer's own name for it."""
    by_suffix = model_tensors_by_suffix(m.label + r.name for m in comps.models for r in m.records)
    out: dict[str, tuple[str | None, str, int | None]] = {}
    for opt in comps.optimizers:
        if opt.flat:
            continue
        group_of = {p: i for i, g in enumerate(opt.groups) for p in g.get("params", [])}
        for pid, recs in opt.states.items():
            param = opt.param_names.get(pid)
            if param is not None:
                found = by_suffix.get(param, [])
                param = found[0] if len(found) == 1 else param  # ambiguous: left as named
            for state in recs:
                out[opt.tensor(pid, state)] = (param, state, group_of.get(pid))
    return out


Listed = tuple[str, str, list[int], str | None, str | None, int | None]


def _listed(view: CheckpointView, r: TensorRecord, shown: str) -> Listed:
    slot = view.slot(r.name)
    if slot is None:
        return shown, r.dtype, list(r.shape), None, None, None
    own = r.name.partition("/")[2] or r.name
    by_id = own == f"state.{slot.param_id}.{slot.state}"  # ``[part/]state.<id>.<state>``
    param = view.slot_param(r.name)
    return shown, r.dtype, list(r.shape), param, slot.state, slot.param_id if by_id else None


def tensor_listing(view: CheckpointView, comps: Components) -> list[Listed]:
    """(name, dtype, shape, param, state, id) of every tensor the passes see, in their names:
    ``param`` and ``state`` from the view's slot of an optimizer state, ``id`` its optimizer
    id when the name is the plain ``[part/]state.<id>.<state>``."""
    out = [_listed(view, r, r.name) for r in view.tensors]
    for opt in extra_optimizer_views(view, comps):
        out += [_listed(opt.view, r, opt.label + r.name) for r in state_records(opt)]
    return out


def summarize_view(cand: Candidate, view: CheckpointView, mtime: float) -> CheckpointSummary:
    """Everything but the tensor figures (norms, NaN counts), which the passes add."""
    comps = collect(view)
    claims = position_claims(view.path, comps)
    step, source = recorded_step(claims)
    opt = next((o for o in comps.optimizers if o.groups), None)
    opt_step = optimizer_step(opt) if opt is not None else None
    if step is None and opt_step is not None:
        step, source = int(opt_step), "optimizer step"
    if step is None and cand.name_step is not None and cand.naming != "save_count":
        step, source = cand.name_step, "name"
    sched = comps.schedulers[0] if comps.schedulers else None
    parts = []
    if comps.models:
        parts.append("model")
    if comps.optimizers:
        parts.append("optimizer")
    if comps.schedulers:
        parts.append("scheduler")
    has_rng = any(rs.has_rng for rs in comps.run_states)
    if has_rng:
        parts.append("rng")
    if any(k for k in claims if not k.startswith("folder name")):
        parts.append("run_state")
    groups = []
    group_of: dict[int, int] = {}
    for i, g in enumerate(opt.groups if opt is not None else []):
        groups.append({k: _plain(g[k]) for k in HYPER_KEYS if k in g})
        ids = [p for p in g.get("params", []) if isinstance(p, int)]
        groups[-1]["n_params"] = len(g.get("params", []))
        for p in ids:
            group_of[p] = i
    trainable: set[str] | None = set()
    tensors = {}
    known = optimizer_states(comps)
    ema = ema_labels(comps)
    bookkeeping = bookkeeping_names(comps)  # run state (a callback's best_score): not followed
    for name, dtype, shape, param, state, pid in tensor_listing(view, comps):
        if name in bookkeeping or _GROUP_VALUE.search(name):  # a LAMB group's step tensor
            continue
        group = None
        if pid is not None:
            group = group_of.get(pid)
        elif name in known:  # nested keys (``optimizer.state.<id>...``), FQN-keyed states
            param, state, group = known[name]
        if state in MOMENTS and param is not None and trainable is not None:
            trainable.add(param)  # ids whose parameter is unknown are not claimed
        role = "ema" if state is None and name.startswith(ema) else None
        tensors[name] = TensorFacts(dtype, shape, param=param, state=state, group=group, role=role)
    if ema:
        parts.append("ema")
    if not comps.optimizers:
        trainable = None
    return CheckpointSummary(
        path=str(cand.path),
        step=step,
        step_source=source,
        name_step=cand.name_step,
        claims=dict(claims),
        mtime=mtime,
        family=view.family,
        kind=view.kind,
        parts=parts,
        opt_step=opt_step,
        sched_step=effective_step(sched.values) if sched is not None else None,
        scheduler={k: _plain(v) for k, v in sched.values.items() if _plain(v) is not None}
        if sched is not None
        else None,
        groups=groups,
        trainable=sorted(trainable) if trainable is not None else None,
        tensors=tensors,
        has_rng=has_rng,
        epoch=recorded_epoch(comps),
        unrecognised=[
            e[: -len(" → other")] for e in view.detection.evidence if e.endswith(" → other")
        ],
    )


def moment_norms(summary: CheckpointSummary) -> dict[str, dict[str, float]]:
    """group -> moment name -> L2 norm over the group's tensors of that state."""
    sums: dict[str, dict[str, float]] = {}
    for t in summary.tensors.values():
        if t.state in MOMENTS and t.norm is not None:
            key = f"group {t.group}" if t.group is not None else "all"
            d = sums.setdefault(key, {})
            d[t.state] = d.get(t.state, 0.0) + t.norm**2
    return {g: {k: v**0.5 for k, v in d.items()} for g, d in sums.items()}
