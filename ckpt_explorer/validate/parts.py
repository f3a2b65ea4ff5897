"""Find the model, optimizer, scheduler and run-state components inside any opened view.

A view may be one file, a sharded folder, a training-state bundle of parts, a DeepSpeed
folder (one part per ``.pt`` file) or a DCP folder whose one view holds ``model.*`` and
``optim.state.<id>.*`` side by side. Rules work on the components, not on families.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from pathlib import Path
from typing import Any

from ..io.raw_values import record_scalar
from ..readers.dcp_optim import groups_from_settings
from ..readers.json_files import optional_json
from ..readers.one_file import part_prefix
from ..readers.optimizer_info import keeps_parameter_order
from ..readers.param_names import FLOAT_PREFIXES, is_buffer_name
from ..readers.roles import DETAIL_ACCELERATE_RNG, RNG_KEYS, TORCH_CPU_RNG_BYTES, rng_kind
from ..record_table import record_column
from ..types import TensorRecord
from ..view import CheckpointView
from .fqn_state import fqn_optimizers, ids_for_groups

# ``<prefix>state.<id>.<name>``; a name may hold dots (bitsandbytes keeps its 8-bit states under
# ``state.<id>.__bnb_optimizer_quant_state__.state1``)
STATE_NAME = re.compile(r"^(.*?)state\.(\d+)\.([^.]+|__bnb_optimizer_quant_state__\.[^.]+)$")
# an optimizer state anywhere in a shown name (``optimizer.state.3.exp_avg``, ``optim/state.3.step``):
# group 1 the id, group 2 the state name
STATE_IN_NAME = re.compile(r"(?:^|[/.])state\.(\d+)\.([^./]+)$")
GROUP_KEY = re.compile(r"^(.*?)param_groups\.(\d+)\.(.+)$")
RUN_KEYS = ("global_step", "global_steps", "step", "iter_num", "epoch", "sample_start_index")
MODEL_KINDS = ("model", "adapter", "training_state")
SCHEDULER_MARKERS = ("last_epoch", "base_lrs")
CHILD_SCHEDULER = re.compile(r"^(.*)_schedulers\.\d+\.$")  # a child of a chained scheduler
EMBEDDINGS = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight")
# Beyond the model families that keep parameter order: one-view states stored in order.
ORDERED_STATE_FAMILIES = ("torch-dcp", "deepspeed")


@dataclass
class ModelPart:
    """Model tensors of one view; ``label + record.name`` is the name shown to users."""

    label: str
    view: CheckpointView
    records: Sequence[TensorRecord]
    folder: Path | None
    config: dict[str, Any] | None
    ordered: bool

    def display(self, name: str) -> str:
        return self.label + name


@dataclass
class OptimizerPart:
    """Optimizer state of one view: ``<prefix>state.<id>.<name>`` records and its groups."""

    label: str
    view: CheckpointView
    prefix: str
    groups: list[dict[str, Any]]
    states: dict[int, dict[str, TensorRecord]]
    scalars: dict[int, dict[str, Any]]
    flat: bool = False  # flat partitions / buffers: ids are not params, shapes not theirs
    param_names: dict[int, str] = field(default_factory=dict)

    def tensor(self, pid: int, state: str) -> str:
        record = self.states.get(pid, {}).get(state)
        if record is not None:  # its own name (FQN-keyed states differ from state.<id>)
            return self.label + record.name
        return self.label + f"{self.prefix}state.{pid}.{state}"

    def group_ids(self) -> list[int]:
        out: list[int] = []
        for g in self.groups:
            out += [p for p in g.get("params", []) if isinstance(p, int)]
        return out

    def all_ids(self) -> list[int]:
        return sorted(set(self.states) | set(self.scalars))

    def steps(self) -> dict[int, float]:
        """Per param id, its ``step`` (tensors loaded: they are 0-dim)."""
        out: dict[int, float] = {}
        for pid in self.all_ids():
            value = self.scalars.get(pid, {}).get("step")
            rec = self.states.get(pid, {}).get("step")
            if rec is not None and rec.numel == 1:
                try:
                    value = record_scalar(rec)  # from the file's bytes: no torch
                    if value is None:
                        value = float(self.view.load(rec.name).reshape(-1)[0])
                except Exception:
                    value = None
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[pid] = float(value)
        return out

    def state_shape(self, pid: int) -> tuple[int, ...] | None:
        for name, rec in self.states.get(pid, {}).items():
            if name != "step" and rec.shape:
                return tuple(rec.shape)
        return None


@dataclass
class ValuesPart:
    """A scheduler or run-state (RNG, meta, running_states.json) dict of plain values."""

    label: str
    kind: str  # "scheduler" | "run_state"
    values: dict[str, Any]
    has_rng: bool = False
    file: str = ""
    # False when the file's ``step`` is not the run position (accelerate's
    # random_states_N.pkl saves its gradient-accumulation counter there).
    step_is_position: bool = True
    detail: str = ""


@dataclass
class Components:
    models: list[ModelPart] = field(default_factory=list)
    optimizers: list[OptimizerPart] = field(default_factory=list)
    schedulers: list[ValuesPart] = field(default_factory=list)
    run_states: list[ValuesPart] = field(default_factory=list)
    leaves: list[tuple[str, CheckpointView]] = field(default_factory=list)
    args: dict[str, Any] = field(default_factory=dict)  # training arguments' plain values


# Parts that record where the run is (RNG states, counters, callback and metric-tracker state):
# their tensors are bookkeeping, not weights or optimizer states.
BOOKKEEPING_KINDS = ("rng", "running_state")


def bookkeeping_names(comps: Components) -> set[str]:
    """Shown names of the tensors of RNG / run-state parts (``best_score = inf`` there is a
    'nothing seen yet' sentinel, not a diverged weight)."""
    return {
        label + r.name
        for label, view in comps.leaves
        if view.kind in BOOKKEEPING_KINDS
        for r in view.tensors
    }


def model_tensors_by_suffix(names: Iterable[str]) -> dict[str, list[str]]:
    """Each model tensor under its name and every tail after a ``.`` or ``/``
    (``model.0.weight`` under ``0.weight`` and ``weight`` too): a parameter name resolves to
    the tensor only when one tensor has it."""
    out: dict[str, list[str]] = {}
    for name in names:
        out.setdefault(name, []).append(name)
        for i, ch in enumerate(name):
            if ch in "./":
                out.setdefault(name[i + 1 :], []).append(name)
    return out


def is_float(dtype: str) -> bool:
    return dtype.startswith(FLOAT_PREFIXES)


def model_config(view: CheckpointView) -> tuple[Path | None, dict[str, Any] | None]:
    """The folder whose ``config.json`` describes this model, and the parsed config."""
    if "config.json" in view.values and isinstance(view.values["config.json"], dict):
        return view.path, view.values["config.json"]
    folder = view.path if view.path.is_dir() else None
    if folder is None and view.path.name in ("model.safetensors", "pytorch_model.bin"):
        folder = view.path.parent
    if folder is None:
        return None, None
    try:
        doc = optional_json(folder, "config.json")
    except Exception:
        return folder, None
    return folder, doc if isinstance(doc, dict) else None


def _optimizer_parts(view: CheckpointView, label: str) -> list[OptimizerPart]:
    states: dict[str, dict[int, dict[str, TensorRecord]]] = {}
    keys = record_column(view.tensors, "name")  # only names holding "state." can match
    for i in compress(range(len(keys)), map(operator.contains, keys, repeat("state."))):
        m = STATE_NAME.match(keys[i])
        if m:
            r = view.tensors[i]
            states.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = r
    scalars: dict[str, dict[int, dict[str, Any]]] = {}
    for key, value in view.values.items():
        m = STATE_NAME.match(key)
        if m:
            scalars.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = value
        elif (m2 := re.match(r"^(.*?)state\.(\d+)$", key)) and value == {}:
            scalars.setdefault(m2.group(1), {}).setdefault(int(m2.group(2)), {})
    by_fqn = fqn_optimizers(view)
    for prefix, found in by_fqn.items():
        states.setdefault(prefix, {}).update(found.states)
        scalars.setdefault(prefix, {}).update(found.scalars)
    parts = []
    # DeepSpeed: the reader gives per-parameter slices (``state.<id>.<name>``, recorded names)
    # beside the flat partitions; the slices are checked like any optimizer, the partitions
    # are not listed a second time.
    per_param = "" in states and view.optimizer is not None and bool(view.optimizer.names)
    for prefix in sorted(set(states) | set(scalars)):
        if prefix and not prefix.endswith("."):
            continue
        if per_param and "base_optimizer_state" in prefix:
            continue
        groups = _groups(view, prefix)
        if not groups and view.optimizer is None and view.kind != "optimizer":
            continue  # a model tensor that merely looks like state.<n>.<x>
        flat = (
            "base_optimizer_state" in prefix
            or ("DeepSpeed" in view.detection.detail and not (per_param and not prefix))
            or bool(view.optimizer is not None and view.optimizer.flat and not prefix)
        )
        names = dict(view.optimizer.param_names) if view.optimizer and not prefix else {}
        if prefix in by_fqn:
            names = dict(by_fqn[prefix].fqn_of)
            groups = ids_for_groups(groups, by_fqn[prefix].id_of())
        elif view.optimizer is not None and any(
            isinstance(p, str) for g in groups for p in g.get("params", ())
        ):  # states renamed to ids by the reader, groups still listing FQNs
            recorded = {n: pid for pid, n in view.optimizer.param_names.items()}
            groups = ids_for_groups(groups, recorded)
            names = names or dict(view.optimizer.param_names)
        parts.append(
            OptimizerPart(
                label,
                view,
                prefix,
                groups,
                states.get(prefix, {}),
                scalars.get(prefix, {}),
                flat,
                names,
            )
        )
    if not parts and view.optimizer is not None and view.optimizer.param_groups:
        flat = bool(view.optimizer.flat)
        parts.append(OptimizerPart(label, view, "", _groups(view, ""), {}, {}, flat))
    return parts


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


def _scheduler_prefixes(values: dict[str, Any]) -> list[str]:
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


def _strip(values: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)}


def _has_rng(view: CheckpointView) -> bool:
    """An RNG state among the view's entries (by content, or by a known RNG key name)."""
    if view.kind == "rng":
        return True
    keys = [r.name for r in view.tensors] + list(view.values)
    if any(k.split(".")[-1] in RNG_KEYS or k.split(".")[0] in RNG_KEYS for k in keys):
        return True
    if any(r.dtype == "uint8" and r.shape == (TORCH_CPU_RNG_BYTES,) for r in view.tensors):
        return True  # torch's CPU generator state, under whatever name
    return any(rng_kind(v) is not None for v in view.values.values())


def _part_label(view: CheckpointView, name: str, part: CheckpointView, label: str) -> str:
    """``label`` of a part: ``<name>/`` for files and folders, the key prefix (``model.``)
    for the entries of a one-file training state, so shown names equal the file's own."""
    if part.path == view.path and view.path.is_file():
        return label + part_prefix(name)
    return f"{label}{name}/"


def _run_state(view: CheckpointView, label: str) -> ValuesPart:
    return ValuesPart(
        label,
        "run_state",
        dict(view.values),
        _has_rng(view),
        str(view.path),
        step_is_position=view.detection.detail != DETAIL_ACCELERATE_RNG,
        detail=view.detection.detail,
    )


def _walk(view: CheckpointView, label: str, out: Components) -> None:
    if view.parts:
        logical = {p.kind for p in view.parts.values() if p.kind != "rank_file"}
        for name, part in view.parts.items():
            shown = _part_label(view, name, part, label)
            if part.kind != "rank_file":
                _walk(part, shown, out)
                continue
            # a rank's own file: what the logical parts hold joined is checked there; only a
            # role they lack (a pipeline stage's own optimizer) is taken from the rank file
            for sub_name, sub in part.parts.items():
                if sub.kind not in logical:
                    _walk(sub, _part_label(part, sub_name, sub, shown), out)
        if view.family == "deepspeed" and not any(
            p.kind == "running_state" for p in view.parts.values()
        ):
            run = {k: v for k, v in view.values.items() if k in RUN_KEYS}
            if run:
                out.run_states.append(ValuesPart(label, "run_state", run, False, str(view.path)))
        return
    if view.kind == "args":
        out.args.update(view.values)  # no tensors, no state to check: what the run asked for
        return
    out.leaves.append((label, view))
    if view.kind == "scheduler":
        out.schedulers.append(ValuesPart(label, "scheduler", dict(view.values), file=label))
        return
    if view.kind in ("rng", "running_state"):
        out.run_states.append(_run_state(view, label))
        return
    optimizers = _optimizer_parts(view, label)
    out.optimizers += optimizers
    for prefix in _scheduler_prefixes(view.values):
        if view.kind != "optimizer":
            out.schedulers.append(ValuesPart(label, "scheduler", _strip(view.values, prefix)))
    taken = {r.name for o in optimizers for recs in o.states.values() for r in recs.values()}
    if view.kind in MODEL_KINDS:
        records: Sequence[TensorRecord] = view.tensors  # a model's: made only when rules ask
        if taken:
            records = [r for r in view.tensors if r.name not in taken]
        if view.family == "deepspeed" or "DeepSpeed" in view.detection.detail:
            records = [r for r in records if r.name.startswith("module.")]
        if records:
            folder, config = model_config(view)
            ordered = view.family in ORDERED_STATE_FAMILIES or keeps_parameter_order(
                view.family, (f.path for f in view.files)
            )
            out.models.append(ModelPart(label, view, records, folder, config, ordered))
        if view.kind == "training_state" and _has_rng(view):
            out.run_states.append(ValuesPart(label, "run_state", {}, True, str(view.path)))
        if view.kind == "training_state":
            for prefix, run in _run_values(view, taken).items():
                out.run_states.append(
                    ValuesPart(label + prefix, "run_state", run, False, str(view.path))
                )


OPTIM_ENTRY = re.compile(r"(?:^|\.)(?:state|param_groups)\.")  # not torchtitan's train_state.step


def _run_values(view: CheckpointView, taken: set[str]) -> dict[str, dict[str, Any]]:
    """prefix -> run position entries (``step``, ``train_state.step`` ...) of a one-view
    training state (DCP), from plain values or 0-dim integer tensors; optimizer and
    scheduler entries excluded."""
    schedulers = tuple(p for p in _scheduler_prefixes(view.values) if p)
    out: dict[str, dict[str, Any]] = {}

    def keep(name: str) -> tuple[str, str] | None:
        prefix, _, key = name.rpartition(".")
        if key not in RUN_KEYS or name in taken or OPTIM_ENTRY.search(name):
            return None
        if prefix and name.startswith(schedulers):
            return None
        return (prefix + "." if prefix else ""), key

    for name, value in view.values.items():
        if (where := keep(name)) is not None:
            out.setdefault(where[0], {})[where[1]] = value
    for r in view.tensors:
        where = keep(r.name)
        if where is None or r.numel != 1 or not r.dtype.startswith(("int", "uint")):
            continue
        try:
            out.setdefault(where[0], {})[where[1]] = int(view.load(r.name).reshape(-1)[0])
        except Exception:
            continue
    return out


def collect(view: CheckpointView, model: CheckpointView | None = None) -> Components:
    """Every component of ``view``; ``model`` (a separate model checkpoint) is added last."""
    out = Components()
    _walk(view, "", out)
    if model is not None and not out.models:
        found = Components()
        _walk(model, "", found)
        for m in found.models:
            m.label = "(model) " + m.label
        out.models += found.models
    return out


def parameter_records(model: ModelPart, expected: int | None = None) -> list[TensorRecord]:
    """The model's trainable-parameter candidates in order: float tensors without known
    buffers, tied aliases (shared storage, or ``lm_head`` when the config ties it) counted once.

    With ``expected`` one less than the count, an ``lm_head.weight`` equal to the embedding
    (tied, saved in separate shards) is dropped too.
    """
    tied = bool(model.config and model.config.get("tie_word_embeddings"))
    seen: set[tuple[str | None, str, int | None]] = set()
    out = []
    for r in model.records:
        if not is_float(r.dtype) or is_buffer_name(r.name):
            continue
        if tied and r.name.endswith("lm_head.weight"):
            continue
        if r.storage_key is not None:
            alias = (r.storage_key, r.file, r.offset)
            if alias in seen:
                continue
            seen.add(alias)
        out.append(r)
    if expected is not None and expected == len(out) - 1 and not tied:
        head = next((r for r in out if r.name.endswith("lm_head.weight")), None)
        embed = next((r for r in out if r.name.endswith(EMBEDDINGS)), None)
        if head is not None and embed is not None and head.shape == embed.shape:
            import torch

            if torch.equal(model.view.load(head.name), model.view.load(embed.name)):
                out.remove(head)
    return out
