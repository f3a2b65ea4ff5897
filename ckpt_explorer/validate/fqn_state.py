"""Optimizer states keyed by parameter FQN (DCP saved from ``get_state_dict``, torchtitan).

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

GROUP_PARAMS = re.compile(r"^(.*?)param_groups\.(\d+)\.params$")


@dataclass
class FqnStates:
    """The FQN-keyed optimizer under one prefix, re-keyed by integer id."""

    fqn_of: dict[int, str]
    states: dict[int, dict[str, TensorRecord]] = field(default_factory=dict)
    scalars: dict[int, dict[str, Any]] = field(default_factory=dict)

    def id_of(self) -> dict[str, int]:
        return {fqn: pid for pid, fqn in self.fqn_of.items()}


def _group_fqns(view: CheckpointView) -> dict[str, list[list[str]]]:
    """prefix -> per group, the FQN list (only groups whose params are names, not ids)."""
    found: dict[str, dict[int, list[str]]] = {}
    for key, value in view.values.items():
        m = GROUP_PARAMS.match(key)
        if m is None or (m.group(1) and not m.group(1).endswith(".")):
            continue
        names = list(value) if isinstance(value, list | tuple) else []
        if names and all(isinstance(p, str) for p in names) and not all(p.isdigit() for p in names):
            found.setdefault(m.group(1), {})[int(m.group(2))] = names
    return {prefix: [groups[i] for i in sorted(groups)] for prefix, groups in found.items()}


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
        found = FqnStates(fqn_of)
        ids = found.id_of()
        head = prefix + "state."
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
