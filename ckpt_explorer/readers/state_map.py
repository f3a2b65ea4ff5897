"""What each entry of a view is: model, optimizer (each state in its slot), scheduler, run
position, RNG — decided once, here, and carried on the view (``view.state_map``).

A view may be one file, a sharded folder, a DeepSpeed ZeRO file, or a one-view training state
(a DCP folder whose one view holds ``model.*``, ``optim.state.<id>.*``, ``lr_scheduler.*`` and
``train_state.step`` side by side). Optimizer states are ``<prefix>state.<id>.<name>`` (a name
may hold dots: bitsandbytes keeps its 8-bit states under
``state.<id>.__bnb_optimizer_quant_state__.state1``) or keyed by parameter FQN
(:mod:`.fqn_state`); several optimizers of one view are told apart by their prefix.

:func:`walk` gives the views whose entries count, labelled as users see their names
(``optimizer/`` for a part file or folder, ``model.`` for an entry of a one-file state).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from ..types import (
    OptimizerState,
    RunState,
    SchedulerState,
    Slot,
    StateMap,
    TensorRecord,
)
from ..view import CheckpointView
from .dcp.optim import groups_from_settings
from .fqn_state import fqn_optimizers, ids_for_groups
from .roles import RUN_KEYS, has_rng_state, is_rng_tensor
from .training_state_file import part_prefix

STATE_NAME = re.compile(r"^(.*?)state\.(\d+)\.([^.]+|__bnb_optimizer_quant_state__\.[^.]+)$")
EMPTY_STATE = re.compile(r"^(.*?)state\.(\d+)$")  # an id whose state is an empty dict (Gemini)
GROUP_KEY = re.compile(r"^(.*?)param_groups\.(\d+)\.(.+)$")
CHILD_SCHEDULER = re.compile(r"^(.*)_schedulers\.\d+\.$")  # a child of a chained scheduler
OPTIM_ENTRY = re.compile(r"(?:^|\.)(?:state|param_groups)\.")  # not torchtitan's train_state.step
MODEL_KINDS = ("model", "adapter", "training_state")
RUN_STATE_KINDS = ("rng", "running_state")
MODEL_KEY = "model."  # the model entry of a one-view training state (``dcp.save({"model": ...})``)


def state_map(view: CheckpointView) -> StateMap:
    """The roles of ``view``'s own entries (a view with parts: only what is not in a part)."""
    if view.parts:
        return _parent_map(view)
    kind = view.kind
    if kind == "scheduler":
        return StateMap(schedulers=(SchedulerState("", dict(view.values)),))
    if kind in RUN_STATE_KINDS:
        entries = {k: k for k in view.values}
        return StateMap(
            run=(RunState("", entries),),
            has_rng=kind == "rng" or has_rng_state(view.tensors, view.values),
        )
    if kind == "args":
        return StateMap()
    optimizers, slots = _optimizers(view)
    taken = {r.name for o in optimizers for recs in o.states.values() for r in recs.values()}
    schedulers = () if kind == "optimizer" else _schedulers(view.values)
    if kind not in MODEL_KINDS:
        return StateMap(optimizers=optimizers, schedulers=schedulers, slots=slots)
    run: tuple[RunState, ...] = ()
    has_rng = False
    if kind == "training_state":
        has_rng = has_rng_state(view.tensors, view.values)
        run = _run_entries(view, taken)
        taken |= {n for rs in run for n in rs.entries.values()}
    model = _model(view, taken, kind == "training_state")
    return StateMap(model, optimizers, schedulers, run, has_rng, slots)


def _parent_map(view: CheckpointView) -> StateMap:
    """A view with parts: the optimizer states its own names hold under a part's key prefix
    (one-file training states); DeepSpeed's run position in the folder's own values when no
    part holds it."""
    in_parts: dict[str, tuple[str, str]] = {}
    for name, part in view.parts.items():
        label = part_label(view, name, part)
        if not label.endswith("/"):  # entries of the same file, under their key prefix
            in_parts.update({label + own: (name, own) for own in part.state_map.slots})
    entries: dict[str, str] = {}
    if view.traits.position_in_values and not any(
        p.kind == "running_state" for p in view.parts.values()
    ):
        entries = {k: k for k in view.values if k in RUN_KEYS}
    return StateMap(run=(RunState("", entries),) if entries else (), in_parts=in_parts)


def _model(view: CheckpointView, taken: set[str], state: bool) -> Sequence[TensorRecord]:
    """The model's tensors: what no optimizer, scheduler or run entry takes; in a one-view
    training state no RNG state either, and only the ``model.`` entry when it has one.

    Decided over the name column: every tensor kept gives the view's own table, a subset
    the table's rows (records are not made here)."""
    table = view.tensors
    names = table.column("name")
    keep: Sequence[int] = range(len(names))
    if taken:
        keep = [i for i in keep if names[i] not in taken]
    prefix = view.traits.module_prefix
    if prefix:
        keep = [i for i in keep if names[i].startswith(prefix)]
    if state:
        keep = [i for i in keep if not is_rng_tensor(table[i])]
        under = [i for i in keep if names[i].startswith(MODEL_KEY)]
        keep = under or keep
    if len(keep) == len(names):
        return table
    return table.take(list(keep))


def _may_hold_optimizer(view: CheckpointView) -> bool:
    """An optimizer needs param groups (or the reader's OptimizerInfo): a model's listing
    with neither is not parsed for ``state.<n>.<x>`` names."""
    if view.optimizer is not None or view.kind == "optimizer":
        return True
    return any("param_groups" in k for k in view.values)


def _optimizers(view: CheckpointView) -> tuple[tuple[OptimizerState, ...], dict[str, Slot]]:
    if not _may_hold_optimizer(view):
        return (), {}
    states: dict[str, dict[int, dict[str, TensorRecord]]] = {}
    keys: dict[str, dict[tuple[int, str], str]] = {}  # prefix -> (id, state) -> entry name
    for r in view.tensors:
        m = STATE_NAME.match(r.name)
        if m:
            pid, state = int(m.group(2)), m.group(3)
            states.setdefault(m.group(1), {}).setdefault(pid, {})[state] = r
            keys.setdefault(m.group(1), {})[(pid, state)] = r.name
    scalars: dict[str, dict[int, dict[str, Any]]] = {}
    for key, value in view.values.items():
        m = STATE_NAME.match(key)
        if m:
            pid, state = int(m.group(2)), m.group(3)
            scalars.setdefault(m.group(1), {}).setdefault(pid, {})[state] = value
            keys.setdefault(m.group(1), {})[(pid, state)] = key
        elif (m2 := EMPTY_STATE.match(key)) and value == {}:
            scalars.setdefault(m2.group(1), {}).setdefault(int(m2.group(2)), {})
    by_fqn = fqn_optimizers(view)
    for prefix, found in by_fqn.items():
        states.setdefault(prefix, {}).update(found.states)
        scalars.setdefault(prefix, {}).update(found.scalars)
        named = keys.setdefault(prefix, {})
        for pid, recs in found.states.items():
            named.update({(pid, s): r.name for s, r in recs.items()})
        head = prefix + "state."
        for pid, vals in found.scalars.items():
            named.update({(pid, s): f"{head}{found.fqn_of[pid]}.{s}" for s in vals})
    info = view.optimizer
    out: list[OptimizerState] = []
    # DeepSpeed: the reader gives per-parameter slices (``state.<id>.<name>``, recorded names)
    # beside the flat partitions; the slices are the optimizer, the partitions are not
    # listed a second time.
    per_param = "" in states and info is not None and bool(info.names)
    for prefix in sorted(set(states) | set(scalars)):
        if prefix and not prefix.endswith("."):
            continue
        if per_param and "base_optimizer_state" in prefix:
            continue
        groups = _groups(view, prefix)
        if not groups and info is None and view.kind != "optimizer":
            continue  # a model tensor that merely looks like state.<n>.<x>
        flat = (
            "base_optimizer_state" in prefix
            or (view.traits.flat_optimizer and not (per_param and not prefix))
            or bool(info is not None and info.flat and not prefix)
        )
        names = dict(info.param_names) if info is not None and not prefix else {}
        if prefix in by_fqn:
            names = dict(by_fqn[prefix].fqn_of)
            groups = ids_for_groups(groups, by_fqn[prefix].id_of())
        elif info is not None and any(
            isinstance(p, str) for g in groups for p in g.get("params", ())
        ):  # states renamed to ids by the reader, groups still listing FQNs
            recorded = {n: pid for pid, n in info.param_names.items()}
            groups = ids_for_groups(groups, recorded)
            names = names or dict(info.param_names)
        out.append(
            OptimizerState(
                prefix,
                tuple(groups),
                states.get(prefix, {}),
                scalars.get(prefix, {}),
                flat,
                names,
            )
        )
    if not out and info is not None and info.param_groups:
        out.append(OptimizerState("", tuple(_groups(view, "")), {}, {}, bool(info.flat)))
    slots = {
        name: Slot(o.prefix, pid, state)
        for o in out
        if not o.flat  # flat buffers: an id is a partition, not a parameter
        for (pid, state), name in keys.get(o.prefix, {}).items()
    }
    return tuple(out), slots


def _groups(view: CheckpointView, prefix: str) -> list[dict[str, Any]]:
    if not prefix and view.optimizer is not None and view.optimizer.param_groups:
        return [dict(g) for g in view.optimizer.param_groups]
    raw = view.values.get(prefix + "param_groups")
    if isinstance(raw, list | tuple):
        return [dict(g) for g in raw if isinstance(g, dict)]
    rebuilt = groups_from_settings(view.values, view.tensors).get(prefix)
    if rebuilt is not None:  # flatten_optimizer_state_dict: FQN lists, made ids by the caller
        return [dict(g) for g in rebuilt]
    flat: dict[int, dict[str, Any]] = {}
    for key, value in view.values.items():
        m = GROUP_KEY.match(key)
        if m and m.group(1) == prefix:
            flat.setdefault(int(m.group(2)), {})[m.group(3)] = value
    groups = [flat[i] for i in sorted(flat)]
    for g in groups:
        if isinstance(g.get("params"), list | tuple):
            g["params"] = [int(p) if str(p).isdigit() else p for p in g["params"]]
    return groups


def scheduler_prefixes(values: dict[str, Any]) -> list[str]:
    """Key prefixes of the schedulers among flat values (``<p>last_epoch`` + ``<p>base_lrs``);
    a ChainedScheduler / SequentialLR (``<p>_last_lr`` + ``<p>_schedulers.<i>.``) is one
    scheduler at ``<p>``, its children not listed apart."""
    out = []
    for key in values:
        if key.endswith("last_epoch"):
            prefix = key[: -len("last_epoch")]
            if (
                (not prefix or prefix.endswith("."))
                and prefix + "base_lrs" in values
                and ".after_scheduler_dict." not in "." + prefix
            ):
                out.append(prefix)
    composite: list[str] = []
    pending = list(out)
    while pending:
        m = CHILD_SCHEDULER.match(pending.pop())
        if m and m.group(1) + "_last_lr" in values and m.group(1) not in composite:
            composite.append(m.group(1))
            pending.append(m.group(1))
    nested = tuple(c + "_schedulers." for c in composite)
    return [p for p in dict.fromkeys(out + composite) if not p.startswith(nested)]


def _schedulers(values: dict[str, Any]) -> tuple[SchedulerState, ...]:
    return tuple(
        SchedulerState(p, {k[len(p) :]: v for k, v in values.items() if k.startswith(p)})
        for p in scheduler_prefixes(values)
    )


def _run_entries(view: CheckpointView, taken: set[str]) -> tuple[RunState, ...]:
    """Run-position entries (``step``, ``train_state.step`` ...) of a one-view training state,
    plain values or one-element integer tensors; optimizer and scheduler entries excluded."""
    schedulers = tuple(p for p in scheduler_prefixes(view.values) if p)
    out: dict[str, dict[str, str]] = {}

    def keep(name: str) -> tuple[str, str] | None:
        prefix, _, key = name.rpartition(".")
        if key not in RUN_KEYS or name in taken or OPTIM_ENTRY.search(name):
            return None
        if prefix and name.startswith(schedulers):
            return None
        return (prefix + "." if prefix else ""), key

    for name in view.values:
        if (where := keep(name)) is not None:
            out.setdefault(where[0], {})[where[1]] = name
    for r in view.tensors:
        where = keep(r.name)
        if where is None or r.numel != 1 or not r.dtype.startswith(("int", "uint")):
            continue
        out.setdefault(where[0], {})[where[1]] = r.name
    return tuple(RunState(prefix, entries) for prefix, entries in out.items())


def part_label(view: CheckpointView, name: str, part: CheckpointView, label: str = "") -> str:
    """How the names of ``part`` (``view.parts[name]``) are shown: ``<name>/`` for files and
    folders, the key prefix (``model.``) for the entries of a one-file training state, so
    shown names equal the file's own."""
    if part.path == view.path and view.path.is_file():
        return label + part_prefix(name)
    return f"{label}{name}/"


def walk(view: CheckpointView, label: str = "") -> Iterator[tuple[str, CheckpointView]]:
    """(label, view) of every view whose entries count: the parts of a view with parts (a
    rank's own file only for a role the logical parts lack: a pipeline stage's optimizer),
    then the view itself when it holds entries of its own; a view without parts itself."""
    if not view.parts:
        yield label, view
        return
    logical = {p.kind for p in view.parts.values() if p.kind != "rank_file"}
    for name, part in view.parts.items():
        shown = part_label(view, name, part, label)
        if part.kind != "rank_file":
            yield from walk(part, shown)
            continue
        for sub_name, sub in part.parts.items():
            if sub.kind not in logical:
                yield from walk(sub, part_label(part, sub_name, sub, shown))
    if view.state_map.run:
        yield label, view
