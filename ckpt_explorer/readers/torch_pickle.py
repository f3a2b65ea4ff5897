"""torch.save files (zip or legacy), classified by the structure of their pickle."""

from __future__ import annotations

from typing import Any

from ..io.location import Location
from ..io.mapped import MappedFile, MappedTensor
from ..io.safe_pickle import LazyTensor, OpaqueObject
from ..io.stat_cache import cached_by_stat
from ..io.torch_file import TorchFileStructure, read_torch_structure, sniff_torch
from ..types import Detection, FileInfo, TensorRecord
from ..view import CheckpointView
from . import roles, training_state_file
from .optimizer_info import optimizer_info_from_tree
from .roles import META_KEYS, RNG_KEYS
from .tree import flatten

LIGHTNING_EVIDENCE = "written by PyTorch Lightning"  # evidence of a Lightning .ckpt
SCHEDULER_KEYS = {"last_epoch", "base_lrs", "_step_count", "_last_lr"}


@cached_by_stat(maxsize=64)
def torch_structure(path: Location) -> TorchFileStructure:
    """The file's pickle structure, read once per (path, mtime, size)."""
    return read_torch_structure(path)


def torch_root(path: Location) -> Any:
    """The pickle root of ``path`` when it is a file that starts as a torch file, else None."""
    if not path.is_file():
        return None
    with path.open("rb") as f:
        if sniff_torch(f.read(16)) is None:
            return None
    return torch_structure(path).root


def _is_int_key(k: Any) -> bool:
    return (isinstance(k, int) and not isinstance(k, bool)) or (isinstance(k, str) and k.isdigit())


def classify(root: Any, nested: bool = False) -> tuple[str, str, list[str]]:
    """(kind, detail, evidence) for an unpickled root object (``nested``: an entry of one,
    not itself split into one-file training-state components)."""
    if isinstance(root, dict):
        keys = set(map(str, root))
        if {"state", "param_groups"} <= keys:
            return "optimizer", "optimizer state_dict", ["dict with 'state' and 'param_groups'"]
        if "optimizer_state_dict" in keys and (
            isinstance(root["optimizer_state_dict"], dict)
            and "zero_stage" in map(str, root["optimizer_state_dict"])
        ):
            return (
                "optimizer",
                roles.DETAIL_ZERO_OPTIMIZER,
                ["'optimizer_state_dict' with 'zero_stage' (DeepSpeed)"],
            )
        if "module" in keys and keys & {"ds_version", "ds_config", "param_shapes"}:
            return (
                "model",
                roles.DETAIL_DEEPSPEED_MODEL,
                [
                    "'module' beside "
                    + ", ".join(sorted(keys & {"ds_version", "ds_config", "param_shapes"}))
                ],
            )
        if (
            root
            and all(_is_int_key(k) for k in root)
            and all(isinstance(v, dict) for v in root.values())
        ):
            return (
                "optimizer",
                "optimizer state shard",
                ["dict of integer param ids -> state dicts"],
            )
        if len(keys & SCHEDULER_KEYS) >= 2:
            found = ", ".join(sorted(keys & SCHEDULER_KEYS))
            return "scheduler", "LR scheduler state", [f"scheduler fields {found}"]
        if _is_composite_scheduler(root):
            return (
                "scheduler",
                "LR scheduler state (chained)",
                [f"'_last_lr' beside '_schedulers', {len(root['_schedulers'])} scheduler states"],
            )
        is_rng, rng_evidence = roles.is_rng_file(root)
        if is_rng:
            if roles.is_accelerate_rng(root):
                detail = roles.DETAIL_ACCELERATE_RNG
            else:
                detail = "RNG states and run position" if keys & META_KEYS else "RNG states"
            return "rng", detail, rng_evidence
        found_parts = [] if nested else training_state_file.components(root, _classify_entry)
        if training_state_file.is_one_file_state(found_parts):
            shown = ", ".join(f"{c[0]!r} ({c[1]})" for c in found_parts)
            evidence = [f"entries {shown} side by side"]
            writer = root.get("pytorch-lightning_version")
            if isinstance(writer, str):
                evidence.append(f"{LIGHTNING_EVIDENCE} {writer} (ModelCheckpoint)")
            return "training_state", training_state_file.DETAIL, evidence
        if keys & RNG_KEYS:
            found = ", ".join(sorted(keys & RNG_KEYS))
            return "rng", "RNG / run metadata", [f"RNG state keys {found}"]
        values = list(root.values())
        if values and all(isinstance(v, LazyTensor) for v in values):
            return "model", "state_dict", [f"dict of {len(values)} str -> tensor"]
        leaves = list(flatten(root))
        tensors = [leaf for _, leaf, t in leaves if t]
        if nested and tensors and _bookkeeping(tensors, len(leaves)):
            return (
                "object",
                "bookkeeping values",
                [f"{len(tensors)} one-element tensor(s) among {len(leaves)} plain values"],
            )
        if tensors:
            return "model", "nested state_dict", [f"nested dict holding {len(tensors)} tensors"]
        if keys & META_KEYS:
            return (
                "running_state",
                "run metadata",
                ["run position keys " + ", ".join(sorted(keys & META_KEYS))],
            )
        return "object", "dict without tensors", [f"dict with keys {sorted(keys)[:6]}"]
    if isinstance(root, list) and root and all(isinstance(g, dict) and "params" in g for g in root):
        return (
            "optimizer",
            "optimizer param-group file",
            [f"list of {len(root)} dicts with 'params'"],
        )
    if isinstance(root, LazyTensor):
        return "model", "single tensor", ["a bare tensor"]
    is_args, args_evidence = roles.is_training_args(root)
    if is_args:
        return "args", "training arguments", [args_evidence]
    if isinstance(root, OpaqueObject):
        return "object", f"pickled {root.qualified_name}", [f"object of {root.qualified_name}"]
    return "object", type(root).__name__, [f"pickled {type(root).__name__}"]


def _bookkeeping(tensors: list[LazyTensor], leaves: int) -> bool:
    """Only one-element tensors, beside plain values: the state of a callback or a metric
    tracker (Lightning's ``ModelCheckpoint.kth_value``, ``EarlyStopping.best_score``), not
    the weights of a model."""
    return len(tensors) < leaves and all(t.numel <= 1 for t in tensors)


def _is_composite_scheduler(root: dict[Any, Any]) -> bool:
    """ChainedScheduler / SequentialLR state: ``_last_lr`` and a list of child schedulers."""
    children = root.get("_schedulers")
    return (
        "_last_lr" in root
        and isinstance(children, list)
        and bool(children)
        and all(isinstance(c, dict) and classify(c, True)[0] == "scheduler" for c in children)
    )


def _classify_entry(entry: Any) -> tuple[str, str, list[str]]:
    return classify(entry, nested=True)


def probe(path: Location) -> Detection | None:
    if not path.is_file():
        return None
    with path.open("rb") as f:
        head = f.read(16)
    container = sniff_torch(head)
    if container is None:
        return None
    structure = torch_structure(path)
    kind, detail, evidence = classify(structure.root)
    magic = (
        "zip magic PK\\x03\\x04 with <archive>/data.pkl"
        if container == "zip"
        else ("legacy torch pickle magic number")
    )
    if structure.report.dangerous_globals:
        evidence.append(
            "pickle references "
            + ", ".join(sorted(structure.report.dangerous_globals))
            + " (never executed)"
        )
    if structure.torchscript:
        detail = f"TorchScript model (torch.jit.save archive; {detail})"
        evidence.append("<archive>/constants.pkl beside data.pkl: TorchScript (torch.jit.load)")
    family = "torch-zip" if container == "zip" else "torch-legacy"
    return Detection(
        str(path), family, kind, (magic, *evidence), detail, roles.content_traits(detail)
    )


def tensor_read_values(mapped: MappedFile, structure: TorchFileStructure, t: LazyTensor) -> Any:
    record = structure.records[t.storage.key]
    start = t.storage.view_offset * t.storage.dtype.itemsize  # a legacy storage view's start
    return MappedTensor(
        mapped,
        record.offset + start,
        max(0, record.nbytes - start),
        t.dtype.name,
        t.shape,
        t.stride,
        t.storage_offset,
        structure.byteorder,
    )


def records_and_values(
    path: Location, rel: str, root: Any, structure: TorchFileStructure, name_prefix: str = ""
) -> tuple[list[TensorRecord], dict[str, Any]]:
    """Tensor records (in pickle order, i.e. state_dict order) and plain values of a tree."""
    mapped = MappedFile(path)
    records: list[TensorRecord] = []
    values: dict[str, Any] = {}
    for name, leaf, is_tensor in flatten(root, prefix=name_prefix):
        if is_tensor:
            records.append(
                TensorRecord(
                    name=name,
                    dtype=str(leaf.dtype).removeprefix("torch."),
                    shape=leaf.shape,
                    nbytes=leaf.nbytes,
                    file=rel,
                    offset=structure.tensor_offset(leaf),
                    storage_key=leaf.storage.key,
                    read_values=tensor_read_values(mapped, structure, leaf),
                )
            )
        else:
            values[name] = leaf
    return records, values


def open_torch(path: Location, detection: Detection) -> CheckpointView:
    structure = torch_structure(path)
    root = structure.root
    optimizer = None
    prefix = ""
    if detection.detail == "optimizer state shard":
        prefix = "state."
    if detection.detail == "optimizer param-group file":
        root = {"param_groups": root}
    records, values = records_and_values(path, path.name, root, structure, prefix)
    if detection.kind == "optimizer":
        optimizer = optimizer_info_from_tree(records, values)
    if detection.traits.flat_optimizer:  # DeepSpeed ZeRO: flat partitions per group
        from .deepspeed.parts import flat_optimizer_info

        optimizer = flat_optimizer_info(CheckpointView(path, detection, (), tuple(records), values))
    parts = {}
    if detection.kind == "training_state" and isinstance(root, dict):
        parts = training_state_file.split_parts(
            path, detection.family, root, records, values, _classify_entry
        )
    warnings: tuple[str, ...] = ()
    if structure.report.dangerous_globals:
        warnings = (
            "the pickle names "
            + ", ".join(sorted(structure.report.dangerous_globals))
            + "; they were listed as opaque objects and never called",
        )
    return CheckpointView(
        path,
        detection,
        (FileInfo(path.name, path.stat().st_size),),
        tuple(records),
        values,
        parts,
        optimizer=optimizer,
        warnings=warnings,
    )
