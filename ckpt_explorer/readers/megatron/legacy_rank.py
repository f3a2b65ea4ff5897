"""One rank's file of a legacy Megatron checkpoint, split into parts by its entries.

Megatron-LM's ``generate_state_dict`` saves, per tensor x pipeline rank,
``mp_rank_TT[_PPP]/model_optim_rng.pt`` = ``torch.save({"args", "checkpoint_version",
"iteration", "model" (or "model0", "model1", ... per virtual-pipeline chunk), "optimizer",
"opt_param_scheduler", "rng_state", "num_floating_point_operations_so_far"})``; with the
DistributedOptimizer the states go to ``distrib_optim.pt`` beside it
(``save_parameter_state``: per model chunk, per (param dtype, grad dtype) buffer, the flat
``param`` / ``exp_avg`` / ``exp_avg_sq`` of the whole buffer) and ``optimizer`` keeps only
``{"optimizer": {"param_groups": ...}}``.

The file's view is a one-file training state whose parts are named by their entries:
``model`` (``model0``...), ``optimizer``, ``rng_state``, ``scheduler``, ``running_state``,
``args``, and ``distrib_optim`` (the flat buffers; which parameter each range of a buffer holds
is not recorded, so no id is named there). The optimizer's ids are named against this rank's
own model order (its ``model`` state_dict, in ``named_parameters()`` order) by
:func:`.param_names.name_ids` — ``aligned`` where exactly one parameter fits.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ...io.location import Location
from ...types import Detection, FileInfo, OptimizerInfo, TensorRecord
from ...view import CheckpointView
from ..optimizer_info import optimizer_info_from_tree
from ..param_names import name_ids, order_from_records
from ..roles import rng_entries
from ..torch_pickle import records_and_values, torch_structure
from .common import files_of, state_parts

PART_FAMILY = "torch-zip"  # each part is torch.save content, kept in state_dict order
MODEL_KEY = re.compile(r"^model\d*$")
DISTRIB_OPTIM = "distrib_optim.pt"
FLAT_NOTE = (
    "distrib_optim.pt holds the DistributedOptimizer's flat buffers; which parameter each "
    "range holds is not recorded in the checkpoint, so no id is named"
)


def model_keys(root: dict[str, Any]) -> list[str]:
    """``["model"]``, or the virtual-pipeline chunks ``["model0", "model1", ...]``."""
    keys = [k for k in root if isinstance(k, str) and MODEL_KEY.match(k)]
    return sorted(keys, key=lambda k: int(k[5:] or -1))


def _under(records: list[TensorRecord], values: dict[str, Any], key: str) -> tuple[Any, Any]:
    head = key + "."
    recs = [replace(r, name=r.name[len(head) :]) for r in records if r.name.startswith(head)]
    vals = {k[len(head) :]: v for k, v in values.items() if k.startswith(head)}
    return recs, vals


def _part(
    path: Location, kind: str, why: str, detail: str, recs: list[TensorRecord], vals: dict[str, Any]
) -> CheckpointView:
    detection = Detection(str(path), PART_FAMILY, kind, (why,), detail)
    return CheckpointView(path, detection, files_of(recs), tuple(recs), vals)


def _optimizer_entry(opt: Any, key: str) -> tuple[str, dict[str, Any]] | None:
    """``(prefix, torch state dict)`` of a saved optimizer: the entry itself, or its
    ``optimizer`` entry (Float16 optimizers, the DistributedOptimizer)."""
    if isinstance(opt, dict) and "param_groups" in opt:
        return key, opt
    inner = opt.get("optimizer") if isinstance(opt, dict) else None
    if isinstance(inner, dict) and "param_groups" in inner:
        return f"{key}.optimizer", inner
    return None


def _optimizer_entries(root: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Part name -> ``(prefix, torch state dict)``: ``optimizer``, or ``optimizer.<i>`` per
    optimizer of a ChainedOptimizer saved as a list (dense and expert parameters)."""
    opt = root.get("optimizer")
    found = _optimizer_entry(opt, "optimizer")
    if found is not None:
        return {"optimizer": found}
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for i, sub in enumerate(opt if isinstance(opt, list) else []):
        entry = _optimizer_entry(sub, f"optimizer.{i}")
        if entry is not None:
            out[f"optimizer.{i}"] = entry
    return out


def rank_view(file: Location, source: str) -> CheckpointView:
    """The view of one ``model_optim_rng.pt`` (``source``: its path in the checkpoint)."""
    structure = torch_structure(file)
    root = structure.root if isinstance(structure.root, dict) else {}
    records, values = records_and_values(file, file.name, root, structure)
    parts: dict[str, CheckpointView] = {}
    models = model_keys(root)
    for key in models:
        recs, vals = _under(records, values, key)
        parts[key] = _part(
            file,
            "model",
            f"entry {key!r} of {source}",
            "Megatron model state_dict (this rank's shards)",
            recs,
            vals,
        )
    model_records = [r for k in models for r in parts[k].tensors]
    flat = file.parent / DISTRIB_OPTIM
    order = order_from_records(model_records, True, f"tensor order of {source}'s model")
    for name, (prefix, torch_sd) in _optimizer_entries(root).items():
        if "state" not in torch_sd:
            if flat.is_file() and name == "optimizer":
                parts[name] = distrib_optim_part(flat, torch_sd, source)
            continue
        recs, vals = _under(records, values, prefix)
        info = optimizer_info_from_tree(recs, vals)
        view = _part(
            file,
            "optimizer",
            f"entry {prefix!r} of {source}: a torch optimizer state_dict",
            "optimizer state_dict",
            recs,
            vals,
        )
        parts[name] = view.with_optimizer(name_ids(info, recs, order))
    if isinstance(root.get("rng_state"), list | dict):
        recs, vals = _under(records, values, "rng_state")
        states = root["rng_state"] if isinstance(root["rng_state"], list) else [root["rng_state"]]
        kinds = {k: v for s in states if isinstance(s, dict) for k, v in rng_entries(s).items()}
        shown = ", ".join(f"{k} ({v})" for k, v in kinds.items())
        parts["rng_state"] = _part(
            file,
            "rng",
            f"'rng_state' in {source}: {len(states)} state(s): {shown}",
            "Megatron RNG states (one per data-parallel rank)",
            recs,
            vals,
        )
    parts.update(state_parts(file, PART_FAMILY, root, source))
    files = [FileInfo(file.name, file.stat().st_size)]
    if "optimizer" in parts and parts["optimizer"].path == flat:
        files.append(FileInfo(DISTRIB_OPTIM, flat.stat().st_size))
    keys = ", ".join(str(k) for k in root)
    detection = Detection(
        str(file),
        PART_FAMILY,
        "training_state",
        (f"torch.save of Megatron-LM's state dict ({keys})",),
        "Megatron-LM model_optim_rng.pt",
    )
    return CheckpointView(file, detection, tuple(files), tuple(records), values, parts)


def distrib_optim_part(flat: Location, torch_sd: dict[str, Any], source: str) -> CheckpointView:
    """``distrib_optim.pt``'s flat buffers, with the param groups ``model_optim_rng.pt`` keeps."""
    structure = torch_structure(flat)
    root = structure.root if isinstance(structure.root, dict) else {}
    records, values = records_and_values(flat, flat.name, root, structure)
    groups = [dict(g) for g in torch_sd.get("param_groups", []) if isinstance(g, dict)]
    info = OptimizerInfo(
        param_groups=tuple(groups), state_ids=(), state_names={}, flat=FLAT_NOTE, padded=True
    )
    numel = sum(r.numel for r in records if r.name.endswith(".param"))
    detection = Detection(
        str(flat),
        PART_FAMILY,
        "optimizer",
        (
            f"{DISTRIB_OPTIM} beside {source}: {len(records)} flat buffer tensor(s) "
            f"(param / exp_avg / exp_avg_sq, {numel} elements per state)",
            f"{len(groups)} param group(s) from {source}'s optimizer.optimizer",
            FLAT_NOTE,
        ),
        "Megatron DistributedOptimizer flat buffers (distrib_optim.pt)",
    )
    return CheckpointView(
        flat,
        detection,
        (FileInfo(flat.name, flat.stat().st_size),),
        tuple(records),
        {**values, "param_groups": groups},
        optimizer=info,
    )
