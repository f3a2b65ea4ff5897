"""``plan_conversion``: decide the output files of a conversion before writing anything."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CkptExplorerError
from ..io.location import Location, as_location
from ..view import CheckpointView
from .plan_types import ConversionPlan, PlannedFile, PlannedTensor
from .renames import unwrap_names
from .source_content import SourceContent
from .source_reading import read_source
from .targets import TARGETS, TargetSpec, target
from .writers import parse_size

if TYPE_CHECKING:
    import torch

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
        to: a target of :data:`~ckpt_explorer.convert.targets.TARGETS`: "safetensors" or "bin"
            (one file; a sharded folder with ``max_shard_size``), "hf" (a folder: safetensors
            shards of at most ``max_shard_size``, 5GB by default, the HF index,
            config.json/generation_config.json copied), "torch" (one torch.save file; a full
            optimizer state_dict for optimizer sources), "dcp" (a DCP folder) ...
        max_shard_size: "5GB", "500MB", "2GiB" or bytes. For an optimizer with ``to="bin"``
            it makes a ColossalAI sharded optimizer folder.
        dtype: cast floating-point tensors to this dtype ("bf16", "fp16", "fp32"); only when
            given. A target with its own types (``TargetSpec.dtypes``) takes one of those.
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
    spec = target(to)
    _check_paths(src, dst, overwrite)
    shard = parse_size(max_shard_size)
    cast = _dtype(dtype, spec)
    view = as_view(source)
    content = read_source(
        view, whole_state=spec.whole_state and not model_only, as_hf=spec.hf_model
    )
    if content.parts_left_out and not model_only and not spec.hf_model:
        raise CkptExplorerError(
            src,
            f"a source that --to {to} holds whole",
            f"a {view.kind} ({view.family}) whose output would leave out "
            + "; ".join(content.parts_left_out),
            "Pass --model-only to write the model weights alone (what is left out is listed)"
            + (
                ", or --to "
                + " or --to ".join(n for n, t in TARGETS.items() if t.whole_state)
                + " to keep the whole state."
                if view.traits.dcp_items
                else "."
            ),
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
    if spec.hf_model and content.kind == "model":
        tensors = unwrap_names(tensors, plan.notes)
    if cast:
        tensors = [_cast(t, cast) for t in tensors]
    if content.kind == "state":
        _plan_state(plan, spec, content, tensors)
    elif content.kind == "optimizer":
        _plan_optimizer(plan, spec, content, tensors, shard)
    else:
        spec.plan(plan, content, tensors, shard)
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


def _dtype(name: str | None, spec: TargetSpec) -> str | None:
    """The cast the planner applies (None: none, or the target applies its own type)."""
    if name is None:
        return None
    if spec.dtypes is not None:
        if name.lower() not in spec.dtypes:
            raise CkptExplorerError(
                None, f"--dtype one of {', '.join(spec.dtypes)} for --to {spec.name}", repr(name)
            )
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
        read_values=_cast_read_values(t, dtype),
    )


def _cast_read_values(t: PlannedTensor, dtype: str) -> Callable[[], torch.Tensor]:
    def load() -> torch.Tensor:
        from ..io.mapped import torch_dtype
        from .writers import _load

        return _load(t).to(torch_dtype(dtype))

    return load


def _plan_state(
    plan: ConversionPlan, spec: TargetSpec, content: SourceContent, tensors: list[PlannedTensor]
) -> None:
    """A whole training state: one torch.save file of the original nested object."""
    if not spec.whole_state or plan.options.get("max_shard_size") is not None:
        whole = " or --to ".join(n for n, t in TARGETS.items() if t.whole_state)
        raise CkptExplorerError(
            plan.source,
            f"--to {whole} (one file) for a whole training state",
            f"--to {plan.target}",
            "Pass --model-only to convert the model weights alone.",
        )
    values = {**content.values, "__order__": content.state_order, "__paths__": content.paths}
    plan.files = [PlannedFile(plan.destination.name, "torch", tuple(tensors), "state", values)]


def _plan_optimizer(
    plan: ConversionPlan,
    spec: TargetSpec,
    content: SourceContent,
    tensors: list[PlannedTensor],
    shard: int | None,
) -> None:
    by_name = {t.name: t for t in tensors}
    order = content.state_order
    if spec.optimizer_file and shard is None:
        values = {**content.values, "__order__": order}
        plan.files = [
            PlannedFile(plan.destination.name, "torch", tuple(tensors), "optimizer", values)
        ]
        return
    if not spec.optimizer_shards:
        one = " or --to ".join(n for n, t in TARGETS.items() if t.optimizer_file)
        sharded = " or --to ".join(n for n, t in TARGETS.items() if t.optimizer_shards)
        raise CkptExplorerError(
            plan.source,
            "a model checkpoint for --to " + spec.name,
            "an optimizer",
            f"Optimizer states convert with --to {one} (one file) or --to {sharded} "
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
