"""Optimizer param_group consistency, state shapes under the id -> name map, step, moments.

Ids are numbered in the optimizer's param order, group by group. When a model is known and
lists its parameters in order, id k belongs to the k-th parameter; a state whose shape is
another parameter's usually means the optimizer was rebuilt with a different param order.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from ..readers.dcp.optim import ORPHAN
from .findings import Finding
from .numeric import TensorStats
from .parts import ModelPart, OptimizerPart, model_tensors_by_suffix, parameter_records

ADAM_KEYS = ("lr", "betas", "eps", "weight_decay")
NOT_ADAM_GROUP_KEYS = ("decay_rate", "clip_threshold", "clipping_threshold")
SHARED_KEYS = ("betas", "eps", "amsgrad", "maximize", "capturable", "differentiable")
MAX_PER_RULE = 20
# below this an id is a position, not a CPython address (the first heap pages)
OBJECT_ID_FLOOR = 1 << 20


def check_optimizer(
    opt: OptimizerPart,
    model: ModelPart | None,
    has_scheduler: bool,
    stats: dict[str, TensorStats] | None,
) -> list[Finding]:
    out = _groups(opt)
    out += _hyper(opt, has_scheduler)
    out += _steps(opt)
    if stats is not None:
        out += _moments(opt, stats)
    if model is not None and not opt.flat:
        out += _against_model(opt, model)
    return out


def _groups(opt: OptimizerPart) -> list[Finding]:
    out: list[Finding] = []
    where = opt.label or None
    if not opt.groups:
        return [
            Finding(
                "optimizer.no_param_groups",
                "error",
                "the optimizer has no param_groups",
                "torch's load_state_dict needs them; the group file is missing or empty.",
                file=where,
            )
        ]
    member: dict[int, list[int]] = {}
    for gi, g in enumerate(opt.groups):
        params = g.get("params")
        if not isinstance(params, list | tuple) and opt.flat:
            continue  # flat buffers: the groups record no per-parameter ids
        if not isinstance(params, list | tuple):
            out.append(Finding("optimizer.group_params", "error", f"group {gi} has no params list"))
            continue
        for p in params:
            member.setdefault(p, []).append(gi)
    if opt.flat:
        return out
    for pid, groups in sorted(member.items(), key=_id_order):
        if len(groups) > 1:
            out.append(
                Finding(
                    "optimizer.duplicate_id",
                    "error",
                    f"param id {pid}{_named(opt, pid) if isinstance(pid, int) else ''} is "
                    f"listed {len(groups)} times (groups {groups})",
                    "Each parameter must belong to exactly one group; rebuild the optimizer.",
                    tensor=opt.tensor(pid, "*"),
                    param_id=pid,
                )
            )
    for pid in opt.all_ids():
        if pid not in member:
            out.append(
                Finding(
                    "optimizer.orphan_state",
                    "error",
                    f"state {pid}{_named(opt, pid)} belongs to no param group",
                    "The state and the group file come from different saves.",
                    tensor=opt.tensor(pid, next(iter(opt.states.get(pid, {})), "*")),
                    param_id=pid,
                )
            )
    ids = sorted(p for p in member if isinstance(p, int) and not isinstance(p, bool))
    if object_ids(ids):
        out.append(
            Finding(
                "optimizer.object_ids",
                "info",
                f"param ids are Python object ids ({len(ids)} ids from {ids[0]} to {ids[-1]}): "
                "the optimizer was saved by torch 1.5 or older, which keyed state by id(p)",
                "Nothing to do: load_state_dict maps the saved ids to the new optimizer's "
                "params by their position in the groups, whatever the numbers are.",
            )
        )
    elif ids and (ids[0] != 0 or ids[-1] != len(ids) - 1):
        gaps = first_gaps(ids)
        out.append(
            Finding(
                "optimizer.id_gaps",
                "warning",
                f"param ids are not contiguous from 0 (missing {gaps})",
                "torch numbers ids 0..N-1; gaps mean states were dropped or merged by hand.",
                param_id=gaps[0] if gaps else None,
            )
        )
    no_state = [p for p in ids if p not in opt.states and p not in opt.scalars]
    if no_state and opt.all_ids():
        out.append(
            Finding(
                "optimizer.no_state",
                "info",
                f"{len(no_state)} of {len(ids)} params have no state (e.g. {no_state[:5]})",
                "Normal for params that never received a gradient (frozen or unused).",
                param_id=no_state[0],
            )
        )
    return out


def object_ids(ids: list[int]) -> bool:
    """Sorted distinct ids that are CPython object addresses (``id(p)``, as torch 1.5 and older
    saved them), not positions: all far above their count (an address is a multiple of 8 past
    the interpreter's first pages, ~1e14 on 64-bit Linux)."""
    return bool(ids) and ids[0] >= OBJECT_ID_FLOOR and all(p % 8 == 0 for p in ids)


def first_gaps(ids: list[int], limit: int = 10) -> list[int]:
    """The first ``limit`` integers in ``0..max(ids)`` missing from the sorted distinct
    ``ids``; walks the ids once and never allocates by their values."""
    gaps: list[int] = []
    expected = 0
    for p in ids:
        if p < 0:
            continue
        while expected < p and len(gaps) < limit:
            gaps.append(expected)
            expected += 1
        if len(gaps) >= limit:
            break
        expected = p + 1
    return gaps


def _named(opt: OptimizerPart, pid: int) -> str:
    name = opt.param_names.get(pid)
    return f" ({name})" if name else ""


def _id_order(item: tuple[Any, Any]) -> tuple[int, int, str]:
    """Integer ids in order, then anything else (a name no state resolved) by its text."""
    pid = item[0]
    return (0, pid, "") if isinstance(pid, int) else (1, 0, str(pid))


def adam_family(opt: OptimizerPart) -> bool:
    """Adam's states (``exp_avg`` and ``exp_avg_sq`` of one param), and nothing of an optimizer
    that keeps a second moment its own way: a factored one (``exp_avg_sq_row``/``_col``,
    ``_r``/``_c``) or a decay schedule / update clipping in its groups (Adafactor)."""
    if any(name.startswith("exp_avg_sq_") for s in opt.states.values() for name in s):
        return False
    if any(k in g for g in opt.groups for k in NOT_ADAM_GROUP_KEYS):
        return False
    return any("exp_avg" in s and "exp_avg_sq" in s for s in opt.states.values())


def _hyper(opt: OptimizerPart, has_scheduler: bool) -> list[Finding]:
    out: list[Finding] = []
    adam = adam_family(opt)
    for gi, g in enumerate(opt.groups):
        # torch's Adam and AdamW write all four (and amsgrad) in every group; an Adam-like
        # class without amsgrad (SparseAdam: lr, betas, eps, maximize) has its own set
        needed = ADAM_KEYS if adam and "amsgrad" in g else ("lr",)
        missing = [k for k in needed if k not in g]
        if missing:
            out.append(
                Finding(
                    "optimizer.hyperparameters",
                    "warning",
                    f"group {gi} lacks {', '.join(missing)}",
                    "load_state_dict takes hyperparameters from the file; missing ones fall "
                    "back to the new optimizer's defaults.",
                )
            )
        lr = g.get("lr")
        if isinstance(lr, int | float) and (not math.isfinite(lr) or lr < 0):
            out.append(
                Finding("optimizer.bad_lr", "error", f"group {gi} has lr {lr}", "Fix the lr.")
            )
        if has_scheduler and "initial_lr" not in g:
            out.append(
                Finding(
                    "optimizer.initial_lr_missing",
                    "error",
                    f"group {gi} has no initial_lr although a scheduler is saved beside it",
                    "torch schedulers created with last_epoch != -1 raise KeyError "
                    "'initial_lr'; save the optimizer after the scheduler was constructed.",
                )
            )
    if len(opt.groups) > 1:
        keys = [set(g) - {"params"} for g in opt.groups]
        common = set.intersection(*keys)
        for gi, k in enumerate(keys):
            if k - common:
                out.append(
                    Finding(
                        "optimizer.group_keys",
                        "warning" if "initial_lr" in k - common else "info",
                        f"group {gi} has {', '.join(sorted(k - common))} that other groups lack",
                        "Groups of one optimizer normally carry the same keys.",
                    )
                )
        for key in SHARED_KEYS:
            vals = [_plain(g.get(key)) for g in opt.groups if key in g]
            if len(set(map(repr, vals))) > 1:
                out.append(
                    Finding(
                        "optimizer.group_values",
                        "info",
                        f"{key} differs across groups: {vals}",
                        "Intended when groups are configured separately.",
                    )
                )
    return out


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def _late_groups(opt: OptimizerPart, steps: dict[int, float], common: float) -> list[Finding]:
    """Groups added with ``add_param_group`` after training started: every param of such a
    group has one step below the others', and every group before it has the common step."""
    per_group: list[float | None] = []
    for g in opt.groups:
        ids = [p for p in g.get("params", ()) if p in steps]
        values = {steps[p] for p in ids}
        per_group.append(values.pop() if len(values) == 1 else None)
    late = [i for i, v in enumerate(per_group) if v is not None and v < common]
    if not late or any(v is None for v in per_group):
        return []
    if any(per_group[i] != common for i in range(min(late))) or min(late) == 0:
        return []
    if any(per_group[i] != common and i not in late for i in range(len(per_group))):
        return []
    out = []
    for i in late:
        step = per_group[i]
        assert step is not None
        out.append(
            Finding(
                "optimizer.late_group",
                "info",
                f"group {i} has step {step:g} while the groups before it have step "
                f"{common:g}: it was added later (add_param_group), {common - step:g} steps "
                "after the others",
                "By design; each group's Adam bias correction follows its own step.",
            )
        )
    return out


def _steps(opt: OptimizerPart) -> list[Finding]:
    steps = opt.steps()
    if len(steps) < 2:
        return []
    common, _ = Counter(steps.values()).most_common(1)[0]
    late = _late_groups(opt, steps, common)
    if late:
        return late
    odd = {pid: s for pid, s in steps.items() if s != common}
    out = []
    for pid, s in list(odd.items())[:MAX_PER_RULE]:
        out.append(
            Finding(
                "optimizer.step_mismatch",
                "warning",
                f"state {pid} has step {s:g} while {len(steps) - len(odd)} params have "
                f"step {common:g}",
                "Params skipped by some updates (no gradient) or states merged from "
                "different saves; Adam's bias correction differs per param.",
                tensor=opt.tensor(pid, "step"),
                param_id=pid,
            )
        )
    return out


def _moments(opt: OptimizerPart, stats: dict[str, TensorStats]) -> list[Finding]:
    out = []
    for pid, states in opt.states.items():
        rec = states.get("exp_avg_sq")
        if rec is None:
            continue
        st = stats.get(opt.label + rec.name)
        if st is not None and st.min is not None and st.min < 0:
            out.append(
                Finding(
                    "optimizer.negative_exp_avg_sq",
                    "error",
                    f"state {pid} exp_avg_sq has negative values (min {st.min:.4g})",
                    "A second moment is a running mean of squares and cannot be negative: the "
                    "state is corrupt or belongs to another tensor.",
                    tensor=opt.label + rec.name,
                    param_id=pid,
                )
            )
    return out


def _against_model(opt: OptimizerPart, model: ModelPart) -> list[Finding]:
    """Findings only where no assignment of parameters to ids fits (see
    readers/param_alignment.py); recorded names are checked against the model's shapes."""
    info = opt.view.optimizer
    if info is None or not info.names:
        return []
    if opt.prefix and not all(pn.how == "recorded" for pn in info.names.values()):
        return []  # ids under a key of a bigger state: only recorded names say whose they are
    out: list[Finding] = []
    ids = opt.group_ids() or opt.all_ids()
    if any(ORPHAN not in msg for msg in info.inconsistencies):  # orphans: see _groups
        out += _positional(opt, model, ids) or [
            Finding(
                "optimizer.state_shape",
                "error",
                f"no parameter of the model fits the optimizer's states: {msg}",
                _hint(msg),
                file=opt.label.rstrip("/") or None,
            )
            for msg in info.inconsistencies
            if ORPHAN not in msg
        ]
        return out
    shapes = _shapes_by_name(model)
    for pid, pn in info.names.items():
        want = opt.state_shape(pid)
        if pn.how != "recorded" or pn.name not in shapes or want is None:
            continue
        if shapes[pn.name] != want and _numel(want) > 1 and len(out) < MAX_PER_RULE:
            out.append(
                Finding(
                    "optimizer.state_shape",
                    "error",
                    f"state {pid} has shape {list(want)} but its parameter {pn.name} "
                    f"(recorded in the file) has {list(shapes[pn.name])}",
                    "The optimizer state belongs to another model or another layout.",
                    tensor=opt.tensor(pid, _first_state(opt, pid)),
                    param_id=pid,
                )
            )
    params = len(parameter_records(model))
    if len(ids) < params:
        out.append(
            Finding(
                "optimizer.param_count",
                "info",
                f"the optimizer holds {len(ids)} of the model's {params} floating-point tensors",
                "Normal for frozen parameters (LoRA bases, frozen embeddings) and buffers.",
            )
        )
    return out


def _shapes_by_name(model: ModelPart) -> dict[str, tuple[int, ...]]:
    """Model tensor shapes by name, also under the name without the state's own prefix
    (``model.layers.0.wq.weight`` as ``layers.0.wq.weight``: a DCP state keys its model
    ``model.<fqn>`` and its optimizer by ``<fqn>``) when that tail names one tensor only."""
    shapes = {r.name: tuple(r.shape) for r in model.records}
    for tail, names in model_tensors_by_suffix(shapes).items():
        if tail not in shapes and len(names) == 1:
            shapes[tail] = shapes[names[0]]
    return shapes


def _hint(message: str) -> str:
    if "another order" in message:
        return (
            "The optimizer was probably rebuilt with a different param order, so state k "
            "belongs to another tensor; rebuild it in the original order."
        )
    return "The optimizer belongs to another model, or its states are still sharded/flattened."


def _positional(opt: OptimizerPart, model: ModelPart, ids: list[int]) -> list[Finding]:
    """One group holding every parameter of an ordered model: id k is the k-th parameter, so
    each id whose state does not have that parameter's shape is named."""
    params = parameter_records(model, len(ids))
    if len(opt.groups) > 1 or not model.ordered or len(ids) != len(params):
        return []
    shapes = {r.name: tuple(r.shape) for r in params}
    out: list[Finding] = []
    for k, pid in enumerate(ids):
        shape = opt.state_shape(pid)
        expected = params[k]
        if shape is None or tuple(expected.shape) == shape or _numel(shape) == 1:
            continue
        owner = next((n for n, s in shapes.items() if s == shape), None)
        out.append(
            Finding(
                "optimizer.state_shape",
                "error",
                f"state {pid} has shape {list(shape)} but its parameter "
                f"{expected.name} has {list(expected.shape)}"
                + (f" (that is the shape of {owner})" if owner else ""),
                _hint("another order" if owner else ""),
                tensor=opt.tensor(pid, _first_state(opt, pid)),
                param_id=pid,
            )
        )
        if len(out) >= MAX_PER_RULE:
            break
    return out


def _first_state(opt: OptimizerPart, pid: int) -> str:
    return next((n for n, r in opt.states[pid].items() if r.shape), "*")


def _numel(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
