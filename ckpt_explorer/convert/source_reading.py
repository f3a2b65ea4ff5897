"""What a source checkpoint contributes to a conversion: tensors, plain values, side files.

Model tensors keep their names; optimizer states are ``state.<id>.<name>`` with
``param_groups`` and non-tensor states as values. A DCP training state can be taken whole
(every tensor and value at its original place). Otherwise the parts of a training state that
are not the model (optimizer, scheduler, RNG state, ...) are left out, and each is named in
``parts_left_out``: the planner writes such a model-only output only when asked to. What is
the model is the readers' decision (``view.state_map``, the parts' kinds and traits).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import CkptExplorerError
from ..io.location import Location
from ..readers.gguf.hf import is_gguf
from ..view import CheckpointView
from .fastpath import read_pieces
from .gguf_source import gguf_hf_source
from .megatron_hf import megatron_hf_source
from .plan_types import Piece, PlannedTensor, format_bytes
from .source_content import SIDE_FILES, SourceContent, planned, tensor_read_values
from .universal import universal_source

if TYPE_CHECKING:
    import torch

MODEL_KEY = "model."  # the model entry of a one-view training state, left off its names


def _pieces_read_values(
    pieces: tuple[Piece, ...], dtype: str, shape: tuple[int, ...]
) -> Callable[[], torch.Tensor]:
    return lambda: read_pieces(pieces, dtype, shape)


def read_source(
    view: CheckpointView, whole_state: bool = False, as_hf: bool = False
) -> SourceContent:
    """The content of ``view`` for a conversion.

    ``whole_state``: take a DCP training state whole (kind "state") instead of its model.
    ``as_hf``: a source whose model is an HF model under other names (a Megatron training
    state) gives that HF model, with the ``config.json`` it needs in ``written``.

    Raises:
        CkptExplorerError: the source holds nothing convertible (e.g. only a scheduler).
    """
    traits = view.traits
    if is_gguf(view):  # its HF model, dequantized, llama.cpp's changes undone
        return gguf_hf_source(view)
    if traits.zero_partitions:
        return _deepspeed(view)
    if as_hf and traits.megatron_names:
        return megatron_hf_source(view)
    if traits.fp32_masters:  # the fp32 masters, as zero_to_fp32 gives them
        return universal_source(view)
    if view.kind == "training_state" and traits.dcp_items:
        return _dcp_whole_state(view) if whole_state else _one_view_state(view)
    if view.parts:
        return _bundle(view)
    if view.kind == "optimizer" and view.optimizer is not None:
        return _optimizer(view)
    if view.kind in ("model", "adapter"):
        memo: dict[str, tuple[str | Location, str, int]] = {}
        content = SourceContent("model", [planned(view, r, memo=memo) for r in view.tensors])
        if view.path.is_dir():
            content.side_files = [
                (view.path / n, n) for n in SIDE_FILES if (view.path / n).is_file()
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
    """The optimizer file's states (the entries the view slots in its optimizer), its
    groups, and every id whose state is empty, in the optimizer's id order."""
    assert view.optimizer is not None
    found = view.state_map
    slots = {name: s for name, s in found.slots.items() if not s.optimizer}
    tensors = [planned(view, r) for r in view.tensors if r.name in slots]
    values: dict[str, Any] = {k: v for k, v in view.values.items() if k in slots}
    own = next((o for o in found.optimizers if not o.prefix), None)
    if own is not None:
        for pid, scalars in own.scalars.items():
            if not scalars and pid not in own.states:  # an id whose state is empty (Gemini)
                values[f"state.{pid}"] = {}
    groups = view.values.get("param_groups")
    if groups is None:
        groups = [dict(g) for g in view.optimizer.param_groups]
    values["param_groups"] = groups
    by_slot = {(s.param_id, s.state): name for name, s in slots.items()}
    order: list[str] = []
    for pid in view.optimizer.state_ids:
        for sname in view.optimizer.state_names.get(pid, ()):
            if (pid, sname) in by_slot:
                order.append(by_slot[pid, sname])
    missing = {t.name for t in tensors} - set(order)
    order += [t.name for t in tensors if t.name in missing]
    return SourceContent("optimizer", tensors, values, order)


def _bundle(view: CheckpointView) -> SourceContent:
    models = [(n, p) for n, p in view.parts.items() if p.kind in ("model", "adapter")]
    if not models:  # HF Trainer + ZeRO-3 without gathered weights: the ZeRO states hold them
        models = [(n, p) for n, p in view.parts.items() if p.traits.zero_partitions]
    trained = [(n, p) for n, p in models if not p.traits.ema_copy]
    if len(models) > 1 and len(trained) == 1:  # the model beside its EMA copy (diffusers)
        models = trained
    if len(models) != 1:
        raise CkptExplorerError(
            view.path,
            "one model part in the training-state folder",
            f"{len(models)} ({', '.join(n for n, _ in models) or 'none'})",
            "Convert one part of the folder by its own path.",
        )
    name, part = models[0]
    content = read_source(part)
    if not content.side_files and view.path.is_dir():  # config.json beside the ZeRO states
        content.side_files = [(view.path / n, n) for n in SIDE_FILES if (view.path / n).is_file()]
    content.parts_left_out += [
        f"part {n} ({p.kind}, {len(p.tensors)} tensor(s), {format_bytes(p.total_bytes)})"
        for n, p in view.parts.items()
        if n != name
    ]
    return content


def _one_view_state(view: CheckpointView) -> SourceContent:
    """The model of a one-view training state (its state map's model entries), the rest
    named as left out."""
    keep = list(view.state_map.model)
    prefix = MODEL_KEY
    kept = {r.name for r in keep}
    tensors = [planned(view, r, r.name.removeprefix(prefix)) for r in keep]
    content = SourceContent("model", tensors)
    groups: dict[str, list[int]] = {}  # group -> [tensors, values, bytes, deeper names]
    for r in view.tensors:
        if r.name not in kept:
            g = groups.setdefault(_group(r.name), [0, 0, 0, 0])
            g[0] += 1
            g[2] += r.nbytes
            g[3] += r.name != _group(r.name)
    for key in view.values:
        g = groups.setdefault(_group(key), [0, 0, 0, 0])
        g[1] += 1
        g[3] += key != _group(key)
    for key, (n_tensors, n_values, nbytes, deeper) in groups.items():
        what = [f"{n_tensors} tensor(s), {format_bytes(nbytes)}"] if n_tensors else []
        what += [f"{n_values} value(s)"] if n_values else []
        content.parts_left_out.append(f"{key}{'.*' if deeper else ''} ({', '.join(what)})")
    if any(r.name.startswith(prefix) for r in keep):
        content.notes.append("names lose their common 'model.' prefix")
    return content


def _group(fqn: str) -> str:
    """``optim.state.3.exp_avg`` -> ``optim.state``; ``step`` -> ``step``."""
    return ".".join(fqn.split(".")[:2])


def _dcp_whole_state(view: CheckpointView) -> SourceContent:
    """Every tensor and value of a DCP training state, at its original object path."""
    from .dcp_state import dcp_layout
    from .writers import _plain

    order, paths = dcp_layout(view.path)
    records = {r.name: r for r in view.tensors}
    tensors = [planned(view, records[n]) for n in order if n in records]
    values: dict[str, Any] = {}
    for key in order:
        if key in records:
            continue
        value = view.values.get(key)
        if key not in view.values or (isinstance(value, dict) and set(value) == {"bytes_item"}):
            raise CkptExplorerError(
                view.path,
                f"a readable value for {key}",
                "an item too large to read safely",
                "Pass --model-only to write the model weights alone.",
            )
        try:
            values[key] = _plain(value, key)
        except CkptExplorerError as e:
            raise CkptExplorerError(
                view.path,
                f"plain values only, to keep the whole training state ({key})",
                e.found,
                "Pass --model-only to write the model weights alone.",
            ) from e
    content = SourceContent("state", tensors, values, order, paths=paths)
    content.notes.append(
        f"the whole training state: {len(tensors)} tensor(s) and {len(values)} value(s) "
        "at their original places, as torch's dcp_to_torch_save writes them"
    )
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
                read_values=_pieces_read_values(p.pieces, "float32", p.shape),
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
                read_values=tensor_read_values(model_view, f"module.{r.name}"),
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
                    read_values=src.read_values,
                )
            )
    content = SourceContent("model", tensors, notes=notes)
    optim_bytes = sum(  # per-parameter slots are views of the partitions: not counted again
        r.nbytes
        for p in view.parts.values()
        if p.kind == "optimizer"
        for r in p.tensors
        if r.name not in p.state_map.slots
    )
    content.parts_left_out.append(
        f"optimizer states ({format_bytes(optim_bytes)}: Adam moments, fp32 partitions used "
        "only to rebuild the weights), LR scheduler and engine metadata"
    )
    return content
