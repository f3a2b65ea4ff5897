"""Optimizer structure from flattened names, and mapping param ids to parameter names."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from ..types import OptimizerInfo, TensorRecord


def split_state_name(name: str) -> tuple[int, str] | None:
    """``"state.12.exp_avg"`` -> ``(12, "exp_avg")``; None for other names."""
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "state" and parts[1].lstrip("-").isdigit():
        return int(parts[1]), parts[2]
    return None


def _plain_groups(groups: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(groups, list | tuple):
        return ()
    out = []
    for g in groups:
        if isinstance(g, dict):
            group = dict(g)
            params = group.get("params", [])
            if isinstance(params, list | tuple):
                group["params"] = [int(p) if str(p).lstrip("-").isdigit() else p for p in params]
            out.append(group)
    return tuple(out)


def optimizer_info_from_tree(
    records: Iterable[TensorRecord], values: Mapping[str, Any], groups: Any = None
) -> OptimizerInfo:
    """Build :class:`OptimizerInfo` from ``state.<id>.<name>`` leaves and ``param_groups``."""
    state_names: dict[int, list[str]] = {}
    for name in [r.name for r in records] + list(values):
        parsed = split_state_name(name)
        if parsed is not None:
            state_names.setdefault(parsed[0], []).append(parsed[1])
    for name, value in values.items():  # an id whose state is an empty dict (Gemini)
        parts = name.split(".")
        if len(parts) == 2 and parts[0] == "state" and parts[1].isdigit() and value == {}:
            state_names.setdefault(int(parts[1]), [])
    if groups is None:
        groups = values.get("param_groups")
    return OptimizerInfo(
        param_groups=_plain_groups(groups),
        state_ids=tuple(sorted(state_names)),
        state_names={k: tuple(v) for k, v in sorted(state_names.items())},
    )


def infer_param_names(
    optimizer: OptimizerInfo,
    state_shapes: Mapping[int, tuple[int, ...]],
    model_records: Iterable[TensorRecord],
) -> OptimizerInfo:
    """Map param ids to model tensor names by order, skipping model tensors whose shape differs.

    Ids follow the optimizer's param order (group by group), which is the model's
    ``named_parameters()`` order in ordinary training scripts. Model tensors that are not
    parameters (buffers) or tied duplicates are skipped when their shape does not match the
    next id's state shape. The result says how it was obtained.
    """
    ordered_ids: list[int] = []
    for group in optimizer.param_groups:
        ordered_ids += [p for p in group.get("params", []) if isinstance(p, int)]
    if not ordered_ids:
        ordered_ids = list(optimizer.state_ids)
    model = [r for r in model_records if r.dtype.startswith(("float", "bfloat", "complex"))]
    names: dict[int, str] = {}
    cursor = 0
    seen_storage: set[tuple[str | None, str, int | None]] = set()
    for pid in ordered_ids:
        want = state_shapes.get(pid)
        while cursor < len(model):
            rec = model[cursor]
            cursor += 1
            alias = (rec.storage_key, rec.file, rec.offset)
            if rec.storage_key is not None and alias in seen_storage:
                continue  # a tied duplicate of a parameter already mapped
            if want is None or tuple(rec.shape) == tuple(want):
                names[pid] = rec.name
                seen_storage.add(alias)
                break
        else:
            break
    complete = len(names) == len(ordered_ids)
    source = "model tensor order matched by shape" + ("" if complete else " (partial)")
    return replace(optimizer, param_names=names, name_source=source)


ORDERED_FAMILIES = (
    "torch-zip",
    "torch-legacy",
    "colossalai-sharded-model",
    "colossalai-safetensors",
)


def keeps_parameter_order(family: str, files: Iterable[str]) -> bool:
    """True if a model checkpoint lists tensors in state_dict (parameter) order.

    torch.save pickles and ColossalAI's indexes and async writer keep insertion order; HF
    indexes are written with sorted keys and the reference safetensors writer sorts by dtype.
    """
    if family in ORDERED_FAMILIES:
        return True
    return family == "hf-single" and not any(f.endswith(".safetensors") for f in files)


def state_shapes(records: Iterable[TensorRecord]) -> dict[int, tuple[int, ...]]:
    """Per param id, the shape of its first non-scalar state tensor."""
    shapes: dict[int, tuple[int, ...]] = {}
    for r in records:
        parsed = split_state_name(r.name)
        if parsed is not None and r.shape and parsed[0] not in shapes:
            shapes[parsed[0]] = tuple(r.shape)
    return shapes
