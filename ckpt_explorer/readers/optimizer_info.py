"""Optimizer structure from flattened names, and which model families keep parameter order.

Two keyings exist: ``optimizer.state_dict()`` (``state.<id>.<name>``, integer ``params``) and
the parameter-name keying of ``torch.distributed.checkpoint.state_dict.get_state_dict`` /
``get_optimizer_state_dict(full_state_dict=True)``, FSDP ``FULL_STATE_DICT`` optimizers
(accelerate's ``optimizer.bin``, Trainer FSDP): ``state.<fqn>.<name>`` with FQN ``params``
lists. The latter is read the way DCP folders are (:func:`.dcp_optim.fqn_optimizer_info`):
ids numbered as torch numbers them, the FQNs kept as ``recorded`` names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..types import OptimizerInfo, TensorRecord
from .dcp_optim import fqn_optimizer_info

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


def optimizer_info_from_tree(
    records: Iterable[TensorRecord], values: Mapping[str, Any], groups: Any = None
) -> OptimizerInfo:
    """Build :class:`OptimizerInfo` from ``state.<id>.<name>`` leaves and ``param_groups``
    (or ``state.<fqn>.<name>`` leaves when the groups list parameter names)."""
    records = list(records)
    if groups is None:
        groups = values.get("param_groups")
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


_RECORDED: dict[int, tuple[OptimizerInfo, frozenset[str]]] = {}


def _recorded_names(info: OptimizerInfo) -> frozenset[str]:
    hit = _RECORDED.get(id(info))
    if hit is None or hit[0] is not info:
        if len(_RECORDED) > 16:
            _RECORDED.clear()
        names = frozenset(n.name for n in info.names.values() if n.how == "recorded" and n.name)
        hit = _RECORDED[id(info)] = (info, names)
    return hit[1]


def recorded_param_of(name: str, info: OptimizerInfo) -> str | None:
    """The parameter of a name-keyed state record (``[<prefix>.]state.<fqn>.<state>``) when
    ``<fqn>`` is a parameter name the optimizer records; None otherwise."""
    recorded = _recorded_names(info)
    head = name.rpartition(".")[0]
    if not recorded or not head:
        return None
    start = 0
    while (i := head.find("state.", start)) >= 0:
        if (i == 0 or head[i - 1] == ".") and head[i + 6 :] in recorded:
            return head[i + 6 :]
        start = i + 1
    return None
