"""Optimizer states keyed by parameter FQN (DCP saved from ``get_state_dict``, torchtitan;
``torch.save`` of ``get_state_dict``'s optimizer, FSDP full-state optimizers).

``torch.distributed.checkpoint.state_dict.get_state_dict`` keys the optimizer by parameter
name: ``<prefix>state.<fqn>.<state>`` and ``<prefix>param_groups.<i>.params`` = list of FQNs.
Ids are numbered as torch numbers them, group by group in each group's list order; when the
reader gives an :class:`~ckpt_explorer.types.OptimizerInfo` whose recorded names map ids to
FQNs, its numbering is used instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..types import TensorRecord
from ..view import CheckpointView
from .dcp.optim import groups_from_settings

GROUP_PARAMS = re.compile(r"^(.*?)param_groups\.(\d+)\.params$")


@dataclass
class FqnStates:
    """The FQN-keyed optimizer under one prefix, re-keyed by integer id."""

    fqn_of: dict[int, str]
    states: dict[int, dict[str, TensorRecord]] = field(default_factory=dict)
    scalars: dict[int, dict[str, Any]] = field(default_factory=dict)

    def id_of(self) -> dict[str, int]:
        return {fqn: pid for pid, fqn in self.fqn_of.items()}


def _fqn_list(value: Any) -> list[str] | None:
    names = list(value) if isinstance(value, list | tuple) else []
    if names and all(isinstance(p, str) for p in names) and not all(p.isdigit() for p in names):
        return names
    return None


def _group_fqns(view: CheckpointView) -> dict[str, list[list[str]]]:
    """prefix -> per group, the FQN list (only groups whose params are names, not ids), from
    flattened ``<prefix>param_groups.<i>.params`` keys (DCP) or a ``<prefix>param_groups``
    list of dicts (a torch.save'd optimizer keyed by name)."""
    found: dict[str, dict[int, list[str]]] = {}
    for key, value in view.values.items():
        m = GROUP_PARAMS.match(key)
        if m is not None and (not m.group(1) or m.group(1).endswith(".")):
            if (names := _fqn_list(value)) is not None:
                found.setdefault(m.group(1), {})[int(m.group(2))] = names
            continue
        prefix = key[: -len("param_groups")] if key.endswith("param_groups") else None
        if prefix is None or (prefix and not prefix.endswith(".")):
            continue
        if not isinstance(value, list | tuple) or not value:
            continue
        lists = [
            _fqn_list(g.get("params")) if isinstance(g, dict) and g.get("params") else []
            for g in value
        ]  # an empty group lists nothing; any other group must list names
        if any(lists) and all(names is not None for names in lists):
            found[prefix] = {i: names for i, names in enumerate(lists) if names is not None}
    out = {prefix: [groups[i] for i in sorted(groups)] for prefix, groups in found.items()}
    for prefix, rebuilt in groups_from_settings(view.values, view.tensors).items():
        out.setdefault(prefix, [list(g["params"]) for g in rebuilt])
    return out


def _recorded_ids(view: CheckpointView, fqns: set[str]) -> dict[int, str] | None:
    """id -> FQN from the reader's recorded names, when they cover exactly these FQNs."""
    info = view.optimizer
    if info is None:
        return None
    named = {pid: pn.name for pid, pn in info.names.items() if pn.how == "recorded" and pn.name}
    if not named:
        named = dict(info.param_names)
    return named if set(named.values()) == fqns else None


def fqn_optimizers(view: CheckpointView) -> dict[str, FqnStates]:
    """prefix -> the FQN-keyed optimizer found under it (empty when there is none)."""
    out: dict[str, FqnStates] = {}
    for prefix, groups in _group_fqns(view).items():
        order = [fqn for group in groups for fqn in group]
        fqn_of = _recorded_ids(view, set(order)) or dict(enumerate(order))
        head = prefix + "state."
        _add_orphans(fqn_of, view, head)
        found = FqnStates(fqn_of)
        ids = found.id_of()
        for r in view.tensors:
            if r.name.startswith(head) and "." in r.name[len(head) :]:
                fqn, state = r.name[len(head) :].rsplit(".", 1)
                if fqn in ids:
                    found.states.setdefault(ids[fqn], {})[state] = r
        for key, value in view.values.items():
            if key.startswith(head) and "." in key[len(head) :]:
                fqn, state = key[len(head) :].rsplit(".", 1)
                if fqn in ids:
                    found.scalars.setdefault(ids[fqn], {})[state] = value
        if found.states or found.scalars:
            out[prefix] = found
    return out


def _add_orphans(fqn_of: dict[int, str], view: CheckpointView, head: str) -> None:
    """Give ids after the groups' to states whose FQN no group lists (so the group rules call
    them orphans); a key under a listed FQN (a nested state) is not one."""
    known = set(fqn_of.values())
    keys = [r.name for r in view.tensors] + list(view.values)
    orphans: list[str] = []
    for key in keys:
        if not key.startswith(head) or "." not in key[len(head) :]:
            continue
        fqn = key[len(head) :].rsplit(".", 1)[0]
        parts = fqn.split(".")
        if any(".".join(parts[:i]) in known for i in range(1, len(parts) + 1)):
            continue
        if fqn not in orphans:
            orphans.append(fqn)
    start = max(fqn_of, default=-1) + 1
    fqn_of.update({start + i: fqn for i, fqn in enumerate(orphans)})


def ids_for_groups(groups: list[dict[str, Any]], ids: dict[str, int]) -> list[dict[str, Any]]:
    """``groups`` with FQN ``params`` replaced by their integer ids."""
    out = []
    for g in groups:
        g = dict(g)
        params = g.get("params")
        if isinstance(params, list | tuple):
            g["params"] = [ids.get(p, p) if isinstance(p, str) else p for p in params]
        out.append(g)
    return out
