"""Optimizer structure from flattened names, and which model families keep parameter order."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
