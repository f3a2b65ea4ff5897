"""A DeepSpeed universal checkpoint as a conversion source: the fp32 masters, not the copy.

The model's weights are what DeepSpeed's own ``zero_to_fp32`` gives for the ZeRO checkpoint the
folder was made from, bit for bit:

- a trainable parameter: its fp32 master ``zero/<name>/fp32.pt`` (copied byte for byte);
- a tied alias (``shared_params``): its target's master (``ds_to_universal`` wrote the alias's
  own ``fp32.pt`` from the module copy, so it holds the rounded training-dtype values);
- a buffer or a frozen parameter: the module copy, floating-point ones cast to float32 (as
  ``zero_to_fp32`` casts buffers and its fp32 output casts everything).

Tensors follow the module copy's state_dict order; masters the module copy lacks (pipeline
checkpoints keep no module there) come after it. ``config.json`` / ``generation_config.json``
are copied from the universal folder, else from the folder that holds it (an HF Trainer's
``checkpoint-N``, a run folder).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CkptExplorerError
from ..io.location import Location
from ..types import TensorRecord
from ..view import CheckpointView
from .fastpath import record_pieces
from .plan_types import PlannedTensor, format_bytes
from .source_content import SIDE_FILES, SourceContent, planned

if TYPE_CHECKING:
    import torch

FLOATS = ("float16", "bfloat16", "float32", "float64")


def _cast_read_values(view: CheckpointView, name: str) -> Callable[[], torch.Tensor]:
    def load() -> torch.Tensor:
        import torch

        return view.load(name).to(torch.float32)

    return load


def _parts(view: CheckpointView) -> tuple[CheckpointView, CheckpointView, str]:
    masters = next(
        (p for n, p in view.parts.items() if p.kind == "model" and n.endswith("*/fp32.pt")), None
    )
    model_name = next(
        (
            n
            for n, p in view.parts.items()
            if p.kind == "model" and n.endswith("_model_states.pt") and ":" not in n
        ),
        None,
    )
    if masters is None or model_name is None:
        raise CkptExplorerError(
            view.path,
            "a universal checkpoint with zero/<param>/fp32.pt and a model-states file",
            ", ".join(view.parts) or "no parts",
        )
    return masters, view.parts[model_name], model_name


def _side_files(view: CheckpointView, masters: CheckpointView) -> list[tuple[Location, str]]:
    folder = masters.path.parent  # the universal folder
    for where in dict.fromkeys((folder, view.path, folder.parent)):
        found = [(where / n, n) for n in SIDE_FILES if (where / n).is_file()]
        if found:
            return found
    return []


def universal_source(view: CheckpointView) -> SourceContent:
    """The model of a universal checkpoint for a conversion (see the module docstring)."""
    masters, model, model_name = _parts(view)
    shared_raw = model.values.get("shared_params")
    shared = {str(k): str(v) for k, v in (shared_raw or {}).items()}
    master_of = {r.name: r for r in masters.tensors}
    memo: dict[str, tuple[str | Location, str, int]] = {}
    by_name: dict[str, PlannedTensor] = {}
    tensors: list[PlannedTensor] = []
    copied: list[str] = []
    module = [r for r in model.tensors if r.name.startswith("module.")]

    def master(name: str, record: TensorRecord) -> PlannedTensor:
        t = planned(masters, record, name, memo)
        pieces = t.pieces
        if pieces is None and len(record.shape) != 1:  # a flat ZeRO-3 file, listed reshaped
            pieces = record_pieces(masters.path, replace(record, shape=(record.numel,)), memo)
        source = f"zero/{record.name}/fp32.pt"
        return PlannedTensor(
            name, source, t.dtype, t.shape, t.nbytes, pieces, read_values=t.read_values
        )

    for r in module:
        name = r.name.removeprefix("module.")
        target = shared.get(name, name)
        if target in master_of:
            t = master(name, master_of[target])
            if target != name:
                t = PlannedTensor(
                    name,
                    f"shares {target}",
                    t.dtype,
                    t.shape,
                    t.nbytes,
                    t.pieces,
                    read_values=t.read_values,
                )
        elif r.dtype in FLOATS and r.dtype != "float32":
            n = r.numel
            source = f"{r.name} as float32"
            loader = _cast_read_values(model, r.name)
            t = PlannedTensor(
                name, source, "float32", tuple(r.shape), n * 4, None, read_values=loader
            )
            copied.append(name)
        else:
            t = planned(model, r, name)
            copied.append(name)
        if name not in by_name:
            by_name[name] = t
            tensors.append(t)
    for name, record in master_of.items():
        if name not in by_name:
            by_name[name] = master(name, record)
            tensors.append(by_name[name])
    content = SourceContent("model", tensors, side_files=_side_files(view, masters))
    n_masters = sum(1 for t in tensors if t.source.startswith("zero/"))
    content.notes.append(
        f"{n_masters} fp32 master weight(s) from zero/<param>/fp32.pt (not the module copy "
        f"in {model_name})"
    )
    if copied:
        content.notes.append(
            f"{len(copied)} buffer(s) / frozen tensor(s) from the module copy "
            f"(floating ones as float32), e.g. {copied[0]}"
        )
    optim = next((p for p in view.parts.values() if p.kind == "optimizer"), None)
    if optim is not None:
        content.parts_left_out.append(
            f"optimizer states ({len(optim.tensors)} tensor(s), "
            f"{format_bytes(sum(r.nbytes for r in optim.tensors))})"
        )
    content.parts_left_out.append(
        f"the module copy in {Path(model_name).name} ({model.tensors[0].dtype if module else '?'}"
        "), LR scheduler and engine metadata"
    )
    return content
