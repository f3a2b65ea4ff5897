"""Plain values passed between readers and every consumer (diff, validate, convert, ui)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# What a checkpoint holds.
KINDS = (
    "model",
    "optimizer",
    "scheduler",
    "rng",
    "running_state",
    "training_state",
    "adapter",
    "args",
    "object",
    "rank_file",  # one rank's file, its content joined into the logical parts beside it
)

# How an optimizer id's parameter name was decided (see readers/param_names.py).
NAME_HOW = ("recorded", "aligned", "ambiguous", "unknown")


def shape_numel(shape: tuple[int, ...]) -> int:
    """Number of elements of a tensor of ``shape`` (1 for a scalar)."""
    n = 1
    for d in shape:
        n *= d
    return n


@dataclass(frozen=True)
class Detection:
    """The family of a checkpoint and the evidence that decided it.

    Attributes:
        path: the path that was examined.
        family: format family id, e.g. ``"colossalai-sharded-optimizer"``.
        kind: what it holds, one of :data:`KINDS`.
        evidence: human-readable reasons, strongest first.
        detail: a finer description ("optimizer param-group file", "pipeline, 2 stages").
    """

    path: str
    family: str
    kind: str
    evidence: tuple[str, ...]
    detail: str = ""

    def explain(self) -> str:
        return f"{self.family} ({self.kind}): " + "; ".join(self.evidence)


@dataclass(frozen=True)
class FileInfo:
    """One file of a checkpoint, relative to the checkpoint's root."""

    path: str
    nbytes: int


@dataclass(frozen=True)
class TensorRecord:
    """One tensor as listed from headers, indexes or pickle structure (no tensor bytes read).

    Attributes:
        name: key in the checkpoint (flattened with ``.`` for nested dicts).
        dtype: torch dtype name without the ``torch.`` prefix, e.g. ``"bfloat16"``.
        shape: logical shape.
        nbytes: bytes of the tensor's own elements (numel x itemsize).
        file: file holding it, relative to the checkpoint root.
        offset: absolute byte offset of its first element in ``file`` where the format has one.
        storage_key: shared-storage identity (torch pickles), to tell aliases apart.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str
    offset: int | None = None
    storage_key: str | None = None
    loader: Callable[[], torch.Tensor] | None = field(default=None, compare=False, repr=False)

    @property
    def numel(self) -> int:
        return shape_numel(self.shape)


@dataclass(frozen=True)
class ParamName:
    """The parameter behind one optimizer id, and how that was decided.

    Attributes:
        name: the parameter name when it is known (``how`` is ``recorded`` or ``aligned``).
        how: ``recorded`` (the files name it), ``aligned`` (the only assignment consistent
            with the model's parameter order, the param groups and every state's shape),
            ``ambiguous`` (several parameters fit: ``candidates``) or ``unknown``.
        candidates: for ``ambiguous``, the parameters that fit (at most a few are kept).
    """

    name: str | None
    how: str
    candidates: tuple[str, ...] = ()

    @property
    def known(self) -> bool:
        return self.name is not None and self.how in ("recorded", "aligned")

    def label(self) -> str:
        """``name`` when known, else ``ambiguous: a | b`` or ``unknown`` (for tables)."""
        if self.known:
            return str(self.name)
        if self.how == "ambiguous" and self.candidates:
            return "ambiguous: " + " | ".join(self.candidates[:3])
        return self.how


@dataclass(frozen=True)
class OptimizerInfo:
    """Structure of an optimizer checkpoint.

    Attributes:
        param_groups: hyperparameters of each group, ``params`` holding the integer ids.
        state_ids: ids that have a state entry, in file order.
        state_names: per id, the state names present (``exp_avg``, ``step``, ...).
        param_names: id -> parameter name, only for ids whose name is known (recorded or
            aligned); never a guess.
        name_source: where the parameter order came from ("" when names were not sought).
        names: per id, the name with how it was decided (including ambiguous/unknown ids).
        inconsistencies: when no assignment of parameters to ids fits the model's order,
            the groups and the state shapes: what does not fit (empty when one does).
        flat: why the states are flat buffers over many parameters (no ids, no
            per-parameter shapes; the groups list no params), "" for per-parameter states.
        padded: the flat buffers hold alignment padding of uninitialised memory, so their
            values cannot be judged (NaN, magnitudes) as a whole.
    """

    param_groups: tuple[dict[str, Any], ...]
    state_ids: tuple[int, ...]
    state_names: dict[int, tuple[str, ...]]
    param_names: dict[int, str] = field(default_factory=dict)
    name_source: str = ""
    names: dict[int, ParamName] = field(default_factory=dict)
    inconsistencies: tuple[str, ...] = ()
    flat: str = ""
    padded: bool = False

    def group_of(self, param_id: int) -> int | None:
        for i, group in enumerate(self.param_groups):
            if param_id in group.get("params", ()):
                return i
        return None
