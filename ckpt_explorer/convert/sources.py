"""What a source checkpoint contributes to a conversion: tensors, plain values, side files.

Model tensors keep their names; optimizer states are ``state.<id>.<name>`` with
``param_groups`` and non-tensor states as values. Parts a target cannot hold (an optimizer
beside a model, a scheduler, RNG state) are dropped and listed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import CkptExplorerError
from ..types import TensorRecord
from ..view import CheckpointView
from .fastpath import read_pieces, record_pieces
from .plan import Piece, PlannedTensor

if TYPE_CHECKING:
    import torch

SIDE_FILES = ("config.json", "generation_config.json")
DCP_OPTIM_PREFIXES = ("optim.", "optimizer.", "state.", "param_groups")


@dataclass
class SourceContent:
    """The tensors (in the source's logical order) and values a source gives a conversion."""

    kind: str  # "model" or "optimizer"
    tensors: list[PlannedTensor]
    values: dict[str, Any] = field(default_factory=dict)
    state_order: list[str] = field(default_factory=list)
    side_files: list[tuple[str, str]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _loader(view: CheckpointView, name: str) -> Callable[[], torch.Tensor]:
    return lambda: view.load(name)


def planned(view: CheckpointView, record: TensorRecord, name: str | None = None) -> PlannedTensor:
    """A source record as an output tensor of the same dtype (fast path when possible)."""
    return PlannedTensor(
        name=name or record.name,
        source=record.name,
        dtype=record.dtype,
        shape=tuple(record.shape),
        nbytes=record.nbytes,
        pieces=record_pieces(view.path, record),
        loader=_loader(view, record.name),
    )


def _pieces_loader(
    pieces: tuple[Piece, ...], dtype: str, shape: tuple[int, ...]
) -> Callable[[], torch.Tensor]:
    return lambda: read_pieces(pieces, dtype, shape)


def read_source(view: CheckpointView) -> SourceContent:
    """The content of ``view`` for a conversion.

    Raises:
        CkptExplorerError: the source holds nothing convertible (e.g. only a scheduler).
    """
    if view.family == "deepspeed":
        return _deepspeed(view)
    if view.kind == "training_state" and view.family == "torch-dcp":
        return _dcp_training_state(view)
    if view.parts:
        return _bundle(view)
    if view.kind == "optimizer" and view.optimizer is not None:
        return _optimizer(view)
    if view.kind in ("model", "adapter"):
        content = SourceContent("model", [planned(view, r) for r in view.tensors])
        if view.path.is_dir():
            content.side_files = [
                (str(view.path / n), n) for n in SIDE_FILES if (view.path / n).is_file()
            ]
        values = [k for k in view.values if k not in ("index.metadata", *SIDE_FILES)]
        values = [k for k in values if not k.startswith("__metadata__")]
        if values:
            content.dropped.append(f"{len(values)} non-tensor value(s), e.g. {values[0]}")
        return content
    raise CkptExplorerError(
        view.path,
        "model weights or optimizer states to convert",
        f"a {view.kind} checkpoint ({view.family})",
        "Convert the model or optimizer part instead.",
    )


def _optimizer(view: CheckpointView) -> SourceContent:
    assert view.optimizer is not None
    tensors = [planned(view, r) for r in view.tensors if r.name.startswith("state.")]
    values: dict[str, Any] = {}
    for k, v in view.values.items():
        if k.startswith("state."):
            values[k] = v
    groups = view.values.get("param_groups")
    if groups is None:
        groups = [dict(g) for g in view.optimizer.param_groups]
    values["param_groups"] = groups
    order: list[str] = []
    tensor_names = {t.name for t in tensors}
    for pid in view.optimizer.state_ids:
        for sname in view.optimizer.state_names.get(pid, ()):
            key = f"state.{pid}.{sname}"
            if key in tensor_names or key in values:
                order.append(key)
    missing = tensor_names - set(order)
    order += [t.name for t in tensors if t.name in missing]
    return SourceContent("optimizer", tensors, values, order)


def _bundle(view: CheckpointView) -> SourceContent:
    models = [(n, p) for n, p in view.parts.items() if p.kind in ("model", "adapter")]
    if len(models) != 1:
        raise CkptExplorerError(
            view.path,
            "one model part in the training-state folder",
            f"{len(models)} ({', '.join(n for n, _ in models) or 'none'})",
            "Convert one part of the folder by its own path.",
        )
    name, part = models[0]
    content = read_source(part)
    content.dropped += [
        f"part {n} ({p.kind}, {len(p.tensors)} tensors): not model weights"
        for n, p in view.parts.items()
        if n != name
    ]
    return content


def _dcp_training_state(view: CheckpointView) -> SourceContent:
    keep = [r for r in view.tensors if not r.name.startswith(DCP_OPTIM_PREFIXES)]
    dropped = len(view.tensors) - len(keep)
    prefix = "model."
    strip = bool(keep) and all(r.name.startswith(prefix) for r in keep)
    tensors = [planned(view, r, r.name.removeprefix(prefix) if strip else None) for r in keep]
    content = SourceContent("model", tensors)
    if dropped:
        content.dropped.append(f"{dropped} optimizer tensor(s) (optimizer-only state)")
    if view.values:
        content.dropped.append(f"{len(view.values)} non-tensor value(s)")
    if strip:
        content.notes.append("names lose their common 'model.' prefix")
    return content


def _deepspeed(view: CheckpointView) -> SourceContent:
    from .zero import zero_parameters

    params, kept, model_path, notes, shared = zero_parameters(view)
    model_view = next(p for p in view.parts.values() if p.path == model_path)
    tensors: list[PlannedTensor] = []
    for p in params:
        nbytes = sum(x.nbytes for x in p.pieces)
        tensors.append(
            PlannedTensor(
                p.name,
                f"fp32 partitions ({len(p.pieces)} range(s))",
                "float32",
                p.shape,
                nbytes,
                p.pieces,
                loader=_pieces_loader(p.pieces, "float32", p.shape),
            )
        )
    by_name = {t.name: t for t in tensors}
    for r in kept:
        t = planned(model_view, r)
        tensors.append(
            PlannedTensor(
                r.name,
                f"module.{r.name}",
                t.dtype,
                t.shape,
                t.nbytes,
                t.pieces,
                loader=_loader(model_view, f"module.{r.name}"),
            )
        )
    for alias, target in shared.items():
        if target in by_name and alias not in by_name:
            src = by_name[target]
            tensors.append(
                PlannedTensor(
                    alias,
                    f"shares {target}",
                    src.dtype,
                    src.shape,
                    src.nbytes,
                    src.pieces,
                    loader=src.loader,
                )
            )
    content = SourceContent("model", tensors, notes=notes)
    optim_bytes = sum(
        r.nbytes for n, p in view.parts.items() if "optim_states" in n for r in p.tensors
    )
    content.dropped.append(
        f"optimizer states ({optim_bytes} bytes: Adam moments, fp32 partitions used only "
        "to rebuild the weights), LR scheduler and engine metadata"
    )
    return content
