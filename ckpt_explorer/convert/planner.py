"""``plan_conversion``: decide the output files of a conversion before writing anything."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CkptExplorerError
from ..io.location import Location, as_location
from ..natural import natural_if_string_ordered
from ..readers.hf.diffusers_config import WEIGHT_STEM, model_config
from ..view import CheckpointView
from .plan_types import TARGETS, ConversionPlan, PlannedFile, PlannedTensor
from .renames import unwrap_names
from .source_content import SourceContent
from .source_reading import read_source
from .writers import parse_size

if TYPE_CHECKING:
    import torch

HF_DEFAULT_SHARD = 5 * 10**9
DTYPES = {
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp64": "float64",
    "float64": "float64",
}
FLOATS = {"float16", "bfloat16", "float32", "float64"}


class DestinationExistsError(CkptExplorerError):
    """The destination exists and ``overwrite`` was not given."""


def plan_conversion(
    source: str | Path | Location | CheckpointView,
    destination: str | Path,
    to: str,
    max_shard_size: str | int | None = None,
    dtype: str | None = None,
    overwrite: bool = False,
    model_only: bool = False,
) -> ConversionPlan:
    """Plan converting ``source`` into ``destination`` (nothing is written).

    Args:
        source: any checkpoint ckpt_explorer opens (file or folder, or a remote location), or
            its open view.
        destination: the file or folder to create.
        to: "safetensors" or "bin" (one file; a sharded folder with ``max_shard_size``),
            "hf" (a folder: safetensors shards of at most ``max_shard_size``, 5GB by default,
            the HF index, config.json/generation_config.json copied), "torch" (one torch.save
            file; a full optimizer state_dict for optimizer sources) or "dcp" (a DCP folder).
        max_shard_size: "5GB", "500MB", "2GiB" or bytes. For an optimizer with ``to="bin"``
            it makes a ColossalAI sharded optimizer folder.
        dtype: cast floating-point tensors to this dtype ("bf16", "fp16", "fp32"); only when given.
        overwrite: allow replacing an existing destination (after the new output is verified).
        model_only: write only the model of a training state, leaving the optimizer,
            scheduler, RNG state ... out (each is listed in ``plan.dropped``). Without it a
            training state converts only where nothing is lost: ``--to torch`` of a DCP
            training state keeps it whole; ``--to hf`` is a model format, so it implies this.

    Raises:
        CkptExplorerError: unknown target, a source the target cannot hold, a training state
            the target would lose parts of without ``model_only``, an existing destination
            without ``overwrite`` (:class:`DestinationExistsError`).

    Example:
        >>> plan = plan_conversion("run/model.bin", "out/model.safetensors", to="safetensors")  # doctest: +SKIP
        >>> print(plan.describe())  # doctest: +SKIP
    """
    from ..api import as_view

    src = source.path if isinstance(source, CheckpointView) else as_location(source)
    dst = Path(destination)
    if to not in TARGETS:
        raise CkptExplorerError(None, f"--to one of {', '.join(TARGETS)}", repr(to))
    _check_paths(src, dst, overwrite)
    shard = parse_size(max_shard_size)
    cast = _dtype(dtype)
    view = as_view(source)
    content = read_source(view, whole_state=to == "torch" and not model_only, as_hf=to == "hf")
    if content.parts_left_out and not model_only and to != "hf":
        raise CkptExplorerError(
            src,
            f"a source that --to {to} holds whole",
            f"a {view.kind} ({view.family}) whose output would leave out "
            + "; ".join(content.parts_left_out),
            "Pass --model-only to write the model weights alone (what is left out is listed)"
            + (", or --to torch to keep the whole state." if view.traits.dcp_items else "."),
        )
    options = {
        "source": str(src),
        "destination": str(dst),
        "to": to,
        "max_shard_size": max_shard_size,
        "dtype": dtype,
        "overwrite": overwrite,
        "model_only": model_only,
    }
    plan = ConversionPlan(
        src,
        dst,
        view.family,
        view.kind,
        to,
        False,
        [],
        options=options,
        dropped=[*content.parts_left_out, *content.dropped],
        notes=list(content.notes),
    )
    if content.parts_left_out:
        plan.notes.append(f"the model only (--to {to}): the other parts are left out")
    tensors = list(content.tensors)
    if to == "hf" and content.kind == "model":
        tensors = unwrap_names(tensors, plan.notes)
    if cast:
        tensors = [_cast(t, cast) for t in tensors]
    if content.kind == "state":
        _plan_state(plan, content, tensors)
    elif content.kind == "optimizer":
        _plan_optimizer(plan, content, tensors, shard)
    else:
        _plan_model(plan, content, tensors, shard)
    if cast:
        n = sum(1 for t in tensors if t.cast_from)
        plan.notes.append(f"{n} floating-point tensor(s) cast to {cast}")
        for _, doc in plan.written:  # a config.json made here says the dtype written
            if "torch_dtype" in doc:
                doc["torch_dtype"] = cast
    return plan


def _check_paths(src: Location, dst: Path, overwrite: bool) -> None:
    if not src.exists():
        raise CkptExplorerError(src, "an existing checkpoint", "nothing at that path")
    s, d = src.resolve(), dst.resolve()
    if s == d or s in d.parents or d in s.parents:
        raise CkptExplorerError(
            dst,
            "a destination apart from the source",
            f"one that overlaps {src}",
            "Write the conversion somewhere else; the source is never modified.",
        )
    if dst.exists() and not overwrite:
        raise DestinationExistsError(
            dst,
            "a destination that does not exist yet",
            "an existing " + ("folder" if dst.is_dir() else "file"),
            "Pass --overwrite to replace it.",
        )
    above = dst.parent
    while not above.exists() and above != above.parent:
        above = above.parent  # missing folders are made when the conversion runs
    if not above.is_dir():
        raise CkptExplorerError(
            above, "a folder (or nothing yet) above the output", "a file", "Choose another output."
        )


def _dtype(name: str | None) -> str | None:
    if name is None:
        return None
    key = name.lower().removeprefix("torch.")
    if key not in DTYPES:
        raise CkptExplorerError(None, f"--dtype one of {', '.join(sorted(DTYPES))}", repr(name))
    return DTYPES[key]


def _cast(t: PlannedTensor, dtype: str) -> PlannedTensor:
    if t.dtype not in FLOATS or t.dtype == dtype:
        return t
    itemsize = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
    n = t.nbytes // itemsize[t.dtype]
    return replace(
        t,
        dtype=dtype,
        nbytes=n * itemsize[dtype],
        cast_from=t.dtype,
        loader=_cast_loader(t, dtype),
    )


def _cast_loader(t: PlannedTensor, dtype: str) -> Callable[[], torch.Tensor]:
    def load() -> torch.Tensor:
        from ..io.mapped import torch_dtype
        from .writers import _load

        return _load(t).to(torch_dtype(dtype))

    return load


def split(tensors: list[PlannedTensor], max_bytes: int | None) -> list[list[PlannedTensor]]:
    """Shards in order: a new one starts when the next tensor would pass ``max_bytes``."""
    shards: list[list[PlannedTensor]] = [[]]
    size = 0
    for t in tensors:
        if max_bytes is not None and shards[-1] and size + t.nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return shards


def _plan_model(
    plan: ConversionPlan, content: SourceContent, tensors: list[PlannedTensor], shard: int | None
) -> None:
    to = plan.target
    if to == "dcp":
        plan.output_is_dir = True
        plan.files = [PlannedFile(".metadata", "dcp", tuple(tensors))]
        return
    if to == "torch" or (to in ("safetensors", "bin") and shard is None):
        writer = "safetensors" if to == "safetensors" else "torch"
        plan.files = [PlannedFile(plan.destination.name, writer, tuple(tensors))]
        return
    plan.output_is_dir = True
    plan.copies = list(content.side_files)
    plan.written = [(name, dict(doc)) for name, doc in content.written]
    if to == "hf":
        shard = shard or HF_DEFAULT_SHARD
    writer = "torch" if to == "bin" else "safetensors"
    stem, ext = ("pytorch_model", "bin") if writer == "torch" else ("model", "safetensors")
    if any(n == "config.json" and model_config(src.parent) for src, n in plan.copies):
        stem = WEIGHT_STEM  # diffusers from_pretrained reads diffusion_pytorch_model.*
    # a name-sorted source (safetensors headers) is packed in natural order: layers 0, 1, 2 …
    shards = split(natural_if_string_ordered(tensors, lambda t: t.name), shard)
    n = len(shards)
    if n == 1:
        plan.files = [PlannedFile(f"{stem}.{ext}", writer, tuple(shards[0]))]
        return
    plan.files = [
        PlannedFile(f"{stem}-{i:05d}-of-{n:05d}.{ext}", writer, tuple(s))
        for i, s in enumerate(shards, 1)
    ]
    plan.index = (f"{stem}.{ext}.index.json", "hf")


def _plan_state(plan: ConversionPlan, content: SourceContent, tensors: list[PlannedTensor]) -> None:
    """A whole training state: one torch.save file of the original nested object."""
    if plan.target != "torch" or plan.options.get("max_shard_size") is not None:
        raise CkptExplorerError(
            plan.source,
            "--to torch (one file) for a whole training state",
            f"--to {plan.target}",
            "Pass --model-only to convert the model weights alone.",
        )
    values = {**content.values, "__order__": content.state_order, "__paths__": content.paths}
    plan.files = [PlannedFile(plan.destination.name, "torch", tuple(tensors), "state", values)]


def _plan_optimizer(
    plan: ConversionPlan, content: SourceContent, tensors: list[PlannedTensor], shard: int | None
) -> None:
    to = plan.target
    by_name = {t.name: t for t in tensors}
    order = content.state_order
    if to in ("torch", "bin") and shard is None:
        values = {**content.values, "__order__": order}
        plan.files = [
            PlannedFile(plan.destination.name, "torch", tuple(tensors), "optimizer", values)
        ]
        return
    if to != "bin":
        raise CkptExplorerError(
            plan.source,
            "a model checkpoint for --to " + to,
            "an optimizer",
            "Optimizer states convert with --to torch (one file) or --to bin "
            "--max-shard-size N (a ColossalAI sharded optimizer folder).",
        )
    plan.output_is_dir = True
    # one shard holds whole parameters (all states of an id), as ColossalAI's sharder does
    ids: dict[str, list[str]] = {}
    for name in order:
        ids.setdefault(name.split(".", 2)[1], []).append(name)
    shards: list[list[str]] = [[]]
    size = 0
    for names in ids.values():
        nbytes = sum(by_name[n].nbytes for n in names if n in by_name)
        assert shard is not None
        if shards[-1] and size + nbytes > shard:
            shards.append([])
            size = 0
        shards[-1] += names
        size += nbytes
    group_file = "pytorch_optim_group.bin"
    files = [
        PlannedFile(
            group_file,
            "torch",
            (),
            "param_groups",
            {"param_groups": content.values["param_groups"]},
        )
    ]
    for i, names in enumerate(shards, 1):
        values = {n: content.values[n] for n in names if n not in by_name}
        values["__order__"] = names
        files.append(
            PlannedFile(
                f"pytorch_optim-{i:05d}.bin",
                "torch",
                tuple(by_name[n] for n in names if n in by_name),
                "optimizer_shard",
                values,
            )
        )
    plan.files = files
    plan.index = ("pytorch_optim.bin.index.json", "colossalai-optimizer")
