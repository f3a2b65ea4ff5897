"""What a conversion source gives: its tensors as planned output tensors, values and side files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..io.location import Location
from ..types import TensorRecord
from ..view import CheckpointView
from .fastpath import record_pieces
from .plan_types import PlannedTensor

if TYPE_CHECKING:
    import torch

SIDE_FILES = ("config.json", "generation_config.json")


@dataclass
class SourceContent:
    """The tensors (in the source's logical order) and values a source gives a conversion."""

    kind: str  # "model", "optimizer" or "state" (a whole DCP training state)
    tensors: list[PlannedTensor]
    values: dict[str, Any] = field(default_factory=dict)
    state_order: list[str] = field(default_factory=list)
    side_files: list[tuple[Location, str]] = field(default_factory=list)
    written: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # JSON files made
    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    parts_left_out: list[str] = field(default_factory=list)
    paths: dict[str, tuple[str | int, ...]] = field(default_factory=dict)


def tensor_read_values(view: CheckpointView, name: str) -> Callable[[], torch.Tensor]:
    return lambda: view.load(name)


def planned(
    view: CheckpointView,
    record: TensorRecord,
    name: str | None = None,
    memo: dict[str, tuple[str | Location, str, int]] | None = None,
) -> PlannedTensor:
    """A source record as an output tensor of the same dtype (fast path when possible).

    ``memo``: one dict shared by the records of ``view`` (see ``record_pieces``).
    """
    return PlannedTensor(
        name=name or record.name,
        source=record.name,
        dtype=record.dtype,
        shape=tuple(record.shape),
        nbytes=record.nbytes,
        pieces=record_pieces(view.path, record, memo),
        read_values=tensor_read_values(view, record.name),
    )
