"""Optimizer structure from flattened names, and which model families keep parameter order.

Two keyings exist: ``optimizer.state_dict()`` (``state.<id>.<name>``, integer ``params``) and
the parameter-name keying of ``torch.distributed.checkpoint.state_dict.get_state_dict`` /
``get_optimizer_state_dict(full_state_dict=True)``, FSDP ``FULL_STATE_DICT`` optimizers
(accelerate's ``optimizer.bin``, Trainer FSDP): ``state.<fqn>.<name>`` with FQN ``params``
lists. The latter is read the way DCP folders are (:func:`.dcp_optim.fqn_optimizer_info`):
ids numbered as torch numbers them, the FQNs kept as ``recorded`` names.

Groups that hold a tensor (LAMB implementations keep ``step`` as a tensor in each group) are
flattened to ``param_groups.<i>.<key>`` leaves; they are put back together here, a one-element
tensor as its value where the file's bytes give it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..io.raw_values import record_scalar
from ..types import OptimizerInfo, TensorRecord
from .dcp.optim import fqn_optimizer_info

NAME_SOURCE = "parameter names recorded as the optimizer's state keys"


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


GROUP_LEAF = re.compile(r"^param_groups\.(\d+)\.(.+)$")


def groups_from_tree(
    records: Iterable[TensorRecord], values: Mapping[str, Any]
) -> list[dict[str, Any]] | None:
    """The groups from ``param_groups.<i>.<key>`` leaves (None when there are none); a tensor
    member is its value when it has one element readable from the file, else its record."""
    leaves: dict[int, dict[str, Any]] = {}
    for name, value in values.items():
        if m := GROUP_LEAF.match(name):
            leaves.setdefault(int(m.group(1)), {})[m.group(2)] = value
    for r in records:
        if m := GROUP_LEAF.match(r.name):
            value = record_scalar(r) if r.numel == 1 else None
            leaves.setdefault(int(m.group(1)), {})[m.group(2)] = r if value is None else value
    if not leaves:
        return None
    return [_nest(leaves[i]) for i in sorted(leaves)]


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"betas.0": a, "betas.1": b}`` -> ``{"betas": [a, b]}`` (a container holding a tensor
    was flattened one level deeper)."""
    out: dict[str, Any] = {}
    deep: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        head, dot, rest = key.partition(".")
        if dot:
            deep.setdefault(head, {})[rest] = value
        else:
            out[key] = value
    for head, sub in deep.items():
        nested = _nest(sub)
        seq = sorted(nested, key=lambda k: int(k) if k.isdigit() else -1)
        if seq and all(k.isdigit() for k in seq) and [int(k) for k in seq] == list(range(len(seq))):
            out[head] = [nested[k] for k in seq]
        else:
            out[head] = nested
    return out


def optimizer_info_from_tree(
    records: Iterable[TensorRecord], values: Mapping[str, Any], groups: Any = None
) -> OptimizerInfo:
    """Build :class:`OptimizerInfo` from ``state.<id>.<name>`` leaves and ``param_groups``
    (or ``state.<fqn>.<name>`` leaves when the groups list parameter names)."""
    records = list(records)
    if groups is None:
        groups = values.get("param_groups")
    if groups is None:
        groups = groups_from_tree(records, values)
    plain = _plain_groups(groups)
    if _lists_names(plain):
        named = fqn_optimizer_info("", list(plain), records, values, NAME_SOURCE)
        if named is not None and (named.state_ids or not _has_id_states(records, values)):
            return named
    state_names: dict[int, list[str]] = {}
    for name in [r.name for r in records] + list(values):
        parsed = split_state_name(name)
        if parsed is not None:
            state_names.setdefault(parsed[0], []).append(parsed[1])
    for name, value in values.items():  # an id whose state is an empty dict (Gemini)
        parts = name.split(".")
        if len(parts) == 2 and parts[0] == "state" and parts[1].isdigit() and value == {}:
            state_names.setdefault(int(parts[1]), [])
    return OptimizerInfo(
        param_groups=plain,
        state_ids=tuple(sorted(state_names)),
        state_names={k: tuple(v) for k, v in sorted(state_names.items())},
    )


def _lists_names(groups: tuple[dict[str, Any], ...]) -> bool:
    """Every group's ``params`` is a list of parameter names (not ids), one at least."""
    lists = [g.get("params") for g in groups]
    return any(lists) and all(
        isinstance(p, list | tuple) and all(isinstance(x, str) for x in p) for p in lists
    )


def _has_id_states(records: list[TensorRecord], values: Mapping[str, Any]) -> bool:
    return any(split_state_name(n) for n in [r.name for r in records] + list(values))


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
