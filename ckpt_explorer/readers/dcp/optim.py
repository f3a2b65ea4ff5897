"""The optimizer inside a DCP state, keyed by parameter FQN or by torch's integer ids.

``torch.distributed.checkpoint.state_dict.get_state_dict(model, optimizer)`` (torchtitan and
others, then ``dcp.save({"model": msd, "optim": osd, ...})``) keys the optimizer by parameter
FQN: ``optim.state.<fqn>.<name>`` tensors and ``optim.param_groups.<i>.params`` = FQN lists.
The records keep those names (what the file holds; the DCP loader reads them by FQN). The
:class:`OptimizerInfo` numbers the parameters as torch would: id = position in param_groups
order (group by group, each group's list order), with the FQNs as ``recorded`` names;
:func:`state_records` gives, per id, its state records.

A plain ``optimizer.state_dict()`` saved through DCP (``optim.state.<id>.<name>``, integer
``params`` lists) gets an :class:`OptimizerInfo` with its own ids and no names.

With ``flatten_optimizer_state_dict=True`` (torchtitan's default) the groups are written per
FQN (``optim.param_groups.<fqn>.<key>``) and the lists are gone: :func:`groups_from_settings`
rebuilds them from the parameters' settings (parameters with equal settings form one group, in
order of first appearance; two groups saved with identical settings become one, which changes
no rule's verdict), then the state is read as above.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ...record_table import record_column
from ...types import OptimizerInfo, ParamName, TensorRecord

GROUP_KEY = re.compile(r"^(.*?)param_groups\.(\d+)\.([^.]+)$")
SOURCE = "FQN keys of the DCP optimizer state"
ORPHAN = "names no parameter of the groups"  # an inconsistency that is an orphan state


def _groups_by_prefix(values: Mapping[str, Any]) -> dict[str, dict[int, dict[str, Any]]]:
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for key, value in values.items():
        m = GROUP_KEY.match(key)
        if m and (not m.group(1) or m.group(1).endswith(".")):
            found.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = value
    return found


def _is_int(p: Any) -> bool:
    return isinstance(p, int) and not isinstance(p, bool)


def optimizer_prefixes(values: Mapping[str, Any]) -> list[str]:
    """Prefixes (``"optim."``) under which param_groups with a ``params`` list are saved."""
    out = []
    for prefix, groups in _groups_by_prefix(values).items():
        lists = [g.get("params") for g in groups.values()]
        if lists and all(isinstance(p, list | tuple) for p in lists):
            out.append(prefix)
    return sorted(out)


def _fqn_ids(groups: list[dict[str, Any]]) -> dict[str, int] | None:
    ids: dict[str, int] = {}
    for g in groups:
        params = g.get("params")
        if not isinstance(params, list | tuple) or not all(isinstance(p, str) for p in params):
            return None
        for fqn in params:
            if fqn in ids:
                return None  # one parameter in two groups: not a state torch wrote
            ids[fqn] = len(ids)
    return ids


def _split_state(rest: str, ids: Mapping[str, int]) -> tuple[int, str] | None:
    """``"<fqn>.<state>"`` -> (id, state) for a FQN of ``ids`` (state names hold no dot)."""
    if "." not in rest:
        return None
    fqn, state = rest.rsplit(".", 1)
    pid = ids.get(fqn)
    return None if pid is None else (pid, state)


def _keys_under(
    prefix: str, records: Iterable[TensorRecord], values: Mapping[str, Any]
) -> list[str]:
    start = prefix + "state."
    names = [r.name for r in records] + list(values)
    return [n[len(start) :] for n in names if n.startswith(start)]


def fqn_optimizer_info(
    prefix: str,
    groups: list[dict[str, Any]],
    records: Iterable[TensorRecord],
    values: Mapping[str, Any],
    source: str = SOURCE,
) -> OptimizerInfo | None:
    """Structure of an optimizer keyed by FQN (``<prefix>state.<fqn>.<name>``, groups listing
    FQNs), numbered as torch numbers it; None when the groups do not list FQNs."""
    groups = [dict(g) for g in groups]
    ids = _fqn_ids(groups)
    if ids is None:
        return None
    state_names: dict[int, list[str]] = {}
    problems: list[str] = []
    for rest in _keys_under(prefix, records, values):
        parsed = _split_state(rest, ids)
        if parsed is None:
            problems.append(f"state {prefix}state.{rest} {ORPHAN}")
            continue
        state_names.setdefault(parsed[0], []).append(parsed[1])
    fqns = [str(p) for g in groups for p in g["params"]]
    for g in groups:
        g["params"] = [ids[p] for p in g["params"]]
    return OptimizerInfo(
        param_groups=tuple(groups),
        state_ids=tuple(sorted(state_names)),
        state_names={k: tuple(v) for k, v in sorted(state_names.items())},
        param_names=dict(enumerate(fqns)),
        name_source=source,
        names={i: ParamName(f, "recorded") for i, f in enumerate(fqns)},
        inconsistencies=tuple(problems[:20]),
    )


FLAT_GROUP_KEY = re.compile(r"^(.*?)param_groups\.(.+)\.([^.]+)$")
FLAT_SOURCE = "FQN keys of the DCP optimizer state (flattened; groups rebuilt from settings)"


def groups_from_settings(
    values: Mapping[str, Any], records: Iterable[TensorRecord] = ()
) -> dict[str, list[dict[str, Any]]]:
    """prefix -> param groups (``params`` = FQN lists) rebuilt from a flattened optimizer
    (``<prefix>param_groups.<fqn>.<key>`` per parameter), for prefixes whose states are keyed
    by those FQNs; empty when there is none."""
    settings: dict[str, dict[str, dict[str, Any]]] = {}
    for key, value in values.items():
        m = FLAT_GROUP_KEY.match(key)
        if m is None or m.group(2).isdigit() or (m.group(1) and not m.group(1).endswith(".")):
            continue
        settings.setdefault(m.group(1), {}).setdefault(m.group(2), {})[m.group(3)] = value
    out: dict[str, list[dict[str, Any]]] = {}
    if not settings:
        return out  # (a model's 90k records need not be walked)
    names = [*record_column(records, "name"), *values]
    for prefix, per_fqn in settings.items():
        head = prefix + "state."
        stated = {n[len(head) :].rsplit(".", 1)[0] for n in names if n.startswith(head)}
        if not stated or not stated <= set(per_fqn) or any("lr" not in s for s in per_fqn.values()):
            continue
        groups: dict[str, dict[str, Any]] = {}
        for fqn, setting in per_fqn.items():
            key = repr(sorted(setting.items()))
            groups.setdefault(key, {**setting, "params": []})["params"].append(fqn)
        out[prefix] = list(groups.values())
    return out


def dcp_optimizer_info(
    records: Iterable[TensorRecord], values: Mapping[str, Any]
) -> tuple[str, OptimizerInfo] | None:
    """(prefix, structure) of the first optimizer saved in a DCP state, or None."""
    records = list(records)
    for prefix, groups in sorted(groups_from_settings(values, records).items()):
        named = fqn_optimizer_info(prefix, groups, records, values, FLAT_SOURCE)
        if named is not None:
            return prefix, named
    by_prefix = _groups_by_prefix(values)
    for prefix in optimizer_prefixes(values):
        groups = [dict(by_prefix[prefix][i]) for i in sorted(by_prefix[prefix])]
        named = fqn_optimizer_info(prefix, groups, records, values)
        if named is not None:
            return prefix, named
        if all(_is_int(p) for g in groups for p in g.get("params", ())):
            state_names: dict[int, list[str]] = {}
            for rest in _keys_under(prefix, records, values):
                pid, _, state = rest.partition(".")
                if pid.isdigit() and state:
                    state_names.setdefault(int(pid), []).append(state)
            info = OptimizerInfo(
                param_groups=tuple(groups),
                state_ids=tuple(sorted(state_names)),
                state_names={k: tuple(v) for k, v in sorted(state_names.items())},
            )
            return prefix, info
    return None


def state_records(
    prefix: str, info: OptimizerInfo, records: Iterable[TensorRecord]
) -> dict[int, dict[str, TensorRecord]]:
    """Per optimizer id, its state records (``{"exp_avg": record, ...}``), FQN- or id-keyed."""
    by_name = {r.name: r for r in records}
    out: dict[int, dict[str, TensorRecord]] = {}
    for pid, states in info.state_names.items():
        key = info.param_names.get(pid, str(pid))
        for state in states:
            rec = by_name.get(f"{prefix}state.{key}.{state}")
            if rec is not None:
                out.setdefault(pid, {})[state] = rec
    return out
