"""The timeline's plain values: per-checkpoint summaries, per-pair summaries, anomalies.

Everything here is JSON-safe (``to_dict``/``from_dict``), so summaries are cached on disk and
the dashboard reads the same objects the CLI prints.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

SEVERITIES = ("error", "warning", "info")


@dataclass
class TensorFacts:
    """One tensor of one checkpoint.

    Attributes:
        dtype, shape: as listed.
        norm: L2 norm over finite elements (None: not a float tensor, or not computed).
        nan, inf: counts (None when not computed).
        param: the model parameter this tensor is or belongs to (optimizer states).
        state: the optimizer state name (``exp_avg``...) for optimizer tensors, else None.
        group: the optimizer param group of an optimizer state, when known.
        role: ``ema`` for the tensors of an averaged copy of the model saved as its own part
            (``ema_N.pt``): followed for NaN/Inf, never as the model's weights.
    """

    dtype: str
    shape: list[int]
    norm: float | None = None
    nan: int | None = None
    inf: int | None = None
    param: str | None = None
    state: str | None = None
    group: int | None = None
    role: str | None = None


@dataclass
class CheckpointSummary:
    """What one checkpoint of the run records, and its tensors' figures.

    Attributes:
        path: the checkpoint (file or folder), as given under the run folder.
        step: the step used to order the run (see ``step_source``); None when unknown.
        step_source: where ``step`` comes from (``trainer_state.json global_step``, a run-state
            file, ``optimizer step``) or ``"name"`` when nothing in the files records it.
        name_step: the step in the file or folder name, when the name has one.
        claims: every recorded position (source -> step), for evidence.
        mtime: newest modification time of its files (seconds).
        family, kind: as detected.
        parts: roles present: ``model``, ``optimizer``, ``scheduler``, ``rng``, ``run_state``.
        opt_step: the optimizer's step (most params' value); None without one.
        sched_step: the scheduler's steps taken (validate.scheduler.effective_step).
        scheduler: the scheduler's plain values (``last_epoch``, ``_last_lr``, ``base_lrs``...).
        groups: per param group its hyperparameters (``lr``, ``initial_lr``, ``betas``...)
            and ``n_params``.
        trainable: parameter names known to have optimizer state (ids whose parameter
            name is ambiguous or unknown are not listed); None without an optimizer.
        moments: group -> ``{"exp_avg": norm, "exp_avg_sq": norm}``.
        tensors: name -> :class:`TensorFacts`.
        epoch: the epoch the files record (``epoch`` of a run state), when one does.
        files: for a checkpoint saved as one file per part, file name -> what it holds
            (``model``, ``EMA of the model``, ``optimizer``...), read from its content.
        unrecognised: files of the folder that are no known part (an unreadable
            ``optimizer.pt`` lands here: evidence for ``part_missing``).
        error: set (one line) when the checkpoint could not be read; nothing else is then.
    """

    path: str
    identity: str = ""
    step: int | None = None
    step_source: str = ""
    name_step: int | None = None
    claims: dict[str, int] = field(default_factory=dict)
    mtime: float = 0.0
    family: str = ""
    kind: str = ""
    parts: list[str] = field(default_factory=list)
    opt_step: float | None = None
    sched_step: int | None = None
    scheduler: dict[str, Any] | None = None
    groups: list[dict[str, Any]] = field(default_factory=list)
    trainable: list[str] | None = None
    moments: dict[str, dict[str, float]] = field(default_factory=dict)
    tensors: dict[str, TensorFacts] = field(default_factory=dict)
    has_rng: bool = False
    epoch: int | None = None
    files: dict[str, str] = field(default_factory=dict)
    unrecognised: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def complete(self) -> bool:
        """Every float tensor has its norm (the tensor pass ran)."""
        return all(t.norm is not None for t in self.tensors.values() if _is_float(t.dtype))

    def to_dict(self, tensors: bool = True) -> dict[str, Any]:
        # asdict deep-copies field by field: slow with thousands of tensors; _json_safe
        # copies the containers anyway
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["tensors"] = {k: vars(t) for k, t in self.tensors.items()}
        if not tensors:
            out.pop("tensors")
        return _json_safe(out)  # type: ignore[no-any-return]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckpointSummary:
        kw = _known_fields(cls, d)
        kw["tensors"] = {k: TensorFacts(**v) for k, v in d.get("tensors", {}).items()}
        return cls(**kw)


@dataclass
class PairSummary:
    """Two consecutive checkpoints: how far each tensor and layer moved.

    Attributes:
        step_a, step_b: the two steps (as ordered).
        ratios: model tensor name -> update ratio ‖Δ‖/‖W_a‖ (0.0 when unchanged).
        layers: layer (name prefix up to the layer index) -> ‖Δ‖/‖W_a‖ over its tensors.
        moments: group -> ``{"exp_avg": ‖Δ‖/‖m_a‖, "exp_avg_sq": ...}``.
        dtype_changes, shape_changes: name -> ``[before, after]``.
        only_a, only_b: model tensors present on one side only.
        unchanged: model float tensors whose bytes did not change.
    """

    path_a: str
    path_b: str
    step_a: int | None = None
    step_b: int | None = None
    ratios: dict[str, float] = field(default_factory=dict)
    layers: dict[str, float] = field(default_factory=dict)
    moments: dict[str, dict[str, float]] = field(default_factory=dict)
    dtype_changes: dict[str, list[str]] = field(default_factory=dict)
    shape_changes: dict[str, list[list[int]]] = field(default_factory=dict)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def to_dict(self, tensors: bool = True) -> dict[str, Any]:
        out = asdict(self)
        if not tensors:
            out.pop("ratios")
        return _json_safe(out)  # type: ignore[no-any-return]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PairSummary:
        return cls(**_known_fields(cls, d))


@dataclass
class Anomaly:
    """Something that went wrong in the run, from the step where it starts.

    Attributes:
        step: the first step showing it (None when the checkpoint's step is unknown).
        kind: ``lr_restart``, ``lr_jump``, ``optimizer_reset``, ``step_back``,
            ``update_spike``, ``update_collapse``, ``frozen``, ``nan_inf``, ``dtype_change``,
            ``shape_change``, ``part_missing``, ``tensors_missing``, ``duplicate_step``,
            ``step_name_mismatch``, ``mixed_runs``, ``mtime_order_unused``, ``step_gap``,
            ``step_from_name``,
            ``unreadable``, ``hyperparameters_changed``.
        severity: ``error``, ``warning`` or ``info``.
        message: one line.
        evidence: the facts behind it.
        path: the checkpoint where it starts.
    """

    step: int | None
    kind: str
    severity: str
    message: str
    evidence: list[str] = field(default_factory=list)
    path: str = ""

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(asdict(self))  # type: ignore[no-any-return]


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    return str(obj)


def _known_fields(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``d`` that name a field of the dataclass ``cls`` (others are dropped)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}
