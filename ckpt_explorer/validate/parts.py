"""The components the rules check — models, optimizers, schedulers, run states — from the
roles the readers gave each view's entries (``view.state_map``, :mod:`..readers.state_map`).

Rules work on the components, not on families: each component keeps the label its names are
shown under (``optimizer/``, ``model.``) and the view its tensors load from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..io.location import Location
from ..io.raw_values import record_scalar
from ..profiles import UNKNOWN, Evidence, ProfileMatch, detect_profile
from ..readers.json_files import optional_json
from ..readers.param_names import FLOAT_PREFIXES, is_buffer_name
from ..readers.state_map import walk
from ..types import OptimizerState, RunState, TensorRecord, Traits
from ..view import CheckpointView

MODEL_KINDS = ("model", "adapter", "training_state")
EMBEDDINGS = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight")


@dataclass
class ModelPart:
    """Model tensors of one view; ``label + record.name`` is the name shown to users."""

    label: str
    view: CheckpointView
    records: Sequence[TensorRecord]
    folder: Location | None
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

    @classmethod
    def of(cls, label: str, view: CheckpointView, opt: OptimizerState) -> OptimizerPart:
        return cls(
            label,
            view,
            opt.prefix,
            list(opt.groups),
            opt.states,
            opt.scalars,
            opt.flat,
            dict(opt.param_names),
        )

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
    traits: Traits = field(default_factory=Traits)  # of its file (accelerate RNG, HF Trainer)

    @property
    def step_is_position(self) -> bool:
        """False when the file's ``step`` is not the run position (accelerate's
        random_states_N.pkl saves its gradient-accumulation counter there)."""
        return self.traits.step_is_position


@dataclass
class Components:
    models: list[ModelPart] = field(default_factory=list)
    optimizers: list[OptimizerPart] = field(default_factory=list)
    schedulers: list[ValuesPart] = field(default_factory=list)
    run_states: list[ValuesPart] = field(default_factory=list)
    leaves: list[tuple[str, CheckpointView]] = field(default_factory=list)
    args: dict[str, Any] = field(default_factory=dict)  # training arguments' plain values
    # the writer profile of the state (what its counters count, which parts it saves)
    writer: ProfileMatch = field(default_factory=lambda: ProfileMatch(UNKNOWN, (), Evidence()))


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


def model_config(view: CheckpointView) -> tuple[Location | None, dict[str, Any] | None]:
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


def _run_values(view: CheckpointView, run: RunState) -> dict[str, Any]:
    """The run position's values: plain values as they are, one-element tensors read."""
    out: dict[str, Any] = {}
    for key, name in run.entries.items():
        if name in view.values:
            out[key] = view.values[name]
            continue
        try:
            out[key] = int(view.load(name).reshape(-1)[0])
        except Exception:
            continue
    return out


def _add(view: CheckpointView, label: str, out: Components) -> None:
    """The components of one view the walk gives (see :func:`..readers.state_map.walk`)."""
    found = view.state_map
    if view.parts:  # a folder's own run position (DeepSpeed's global_steps)
        for rs in found.run:
            values = _run_values(view, rs)
            out.run_states.append(ValuesPart(label, "run_state", values, False, str(view.path)))
        return
    kind = view.kind
    if kind == "args":
        out.args.update(view.values)  # no tensors, no state to check: what the run asked for
        return
    out.leaves.append((label, view))
    if kind == "scheduler":
        out.schedulers.append(ValuesPart(label, "scheduler", dict(view.values), file=label))
        return
    if kind in BOOKKEEPING_KINDS:
        out.run_states.append(
            ValuesPart(
                label, "run_state", dict(view.values), found.has_rng, str(view.path), view.traits
            )
        )
        return
    out.optimizers += [OptimizerPart.of(label, view, o) for o in found.optimizers]
    out.schedulers += [ValuesPart(label, "scheduler", dict(s.values)) for s in found.schedulers]
    if kind not in MODEL_KINDS:
        return
    if found.model:
        folder, config = model_config(view)
        ordered = view.traits.keeps_order
        out.models.append(ModelPart(label, view, found.model, folder, config, ordered))
    if found.has_rng:
        out.run_states.append(ValuesPart(label, "run_state", {}, True, str(view.path)))
    for rs in found.run:
        values = _run_values(view, rs)
        out.run_states.append(
            ValuesPart(label + rs.prefix, "run_state", values, False, str(view.path))
        )


def collect(view: CheckpointView, model: CheckpointView | None = None) -> Components:
    """Every component of ``view``; ``model`` (a separate model checkpoint) is added last."""
    out = Components(writer=detect_profile(view))
    for label, part in walk(view):
        _add(part, label, out)
    if model is not None and not out.models:
        found = Components()
        for label, part in walk(model):
            _add(part, label, found)
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
