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
    "object",
)


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
class OptimizerInfo:
    """Structure of an optimizer checkpoint.

    Attributes:
        param_groups: hyperparameters of each group, ``params`` holding the integer ids.
        state_ids: ids that have a state entry, in file order.
        state_names: per id, the state names present (``exp_avg``, ``step``, ...).
        param_names: id -> parameter name when it can be known.
        name_source: how ``param_names`` was obtained ("" when it was not).
    """

    param_groups: tuple[dict[str, Any], ...]
    state_ids: tuple[int, ...]
    state_names: dict[int, tuple[str, ...]]
    param_names: dict[int, str] = field(default_factory=dict)
    name_source: str = ""

    def group_of(self, param_id: int) -> int | None:
        for i, group in enumerate(self.param_groups):
            if param_id in group.get("params", ()):
                return i
        return None
