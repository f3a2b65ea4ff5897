"""megatron-core ``dist_checkpointing`` folders (``--ckpt-format torch_dist``), read without
megatron and without unpickling anything freely.

``iter_NNNNNNN/`` holds ``metadata.json`` (``{"sharded_backend": "torch_dist", ...}``),
``common.pt`` (``torch.save`` of the non-sharded state: ``args``, ``checkpoint_version``,
``iteration``, ``opt_param_scheduler``, the optimizer's ``param_groups`` and ``common_step``,
``num_floating_point_operations_so_far``, ``content_metadata``) and a torch DCP checkpoint
(``.metadata`` + ``__R_I.distcp``) of the sharded state: the model's ``ShardedTensor`` s under
their sharded keys with global shapes (tensor-parallel shards already put together by DCP's
chunks), the optimizer states keyed by those keys, and ``ShardedObject`` s (``rng_state``,
``_extra_state``) as byte items. Its save dir holds ``latest_checkpointed_iteration.txt``;
opening the save dir opens the folder it names.

The view's parts (see :mod:`.common` for scheduler / running_state / args):

- ``model``: one record per parameter, named as the module names it (:mod:`.names`:
  stacked layer keys listed per layer, the local spec's key map undone); a layer's record
  loads only that layer's box of the stacked DCP tensor (:mod:`.slices`);
- ``optimizer``: ``state.<id>.<name>`` per parameter with megatron-core's ids and the names
  recorded by the sharded keys (:mod:`.dist_optim`);
- ``rng``: the ``rng_state`` objects (one per pipeline x tensor rank), absent when not saved.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from ...io.location import Location
from ...io.paths import found_in, key_prefix
from ...types import Detection, FileInfo, TensorRecord
from ...view import CheckpointView, prefixed
from ..dcp.folder import read_metadata
from ..roles import rng_entries
from ..torch_pickle import torch_structure
from ..tree import flatten
from . import dist_optim
from .common import (
    files_of,
    iteration_of,
    layout_line,
    namespace_fields,
    save_dir_line,
    state_parts,
    tracked_folder,
)
from .dist_folder import DistFolder, ModelParam
from .names import expand_layers, is_local_spec, layer_count, layer_name, stacked_key

FAMILY = "megatron-dist"
BACKEND = "torch_dist"
MAX_JSON = 1 << 20
RNG_PREFIX = "rng_state/"
EXTRA_STATE = "._extra_state/"


def _backend(folder: Location) -> str | None:
    meta = folder / "metadata.json"
    if not meta.is_file() or meta.stat().st_size > MAX_JSON or not (folder / ".metadata").is_file():
        return None
    try:
        doc = json.loads(meta.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    backend = doc.get("sharded_backend") if isinstance(doc, dict) else None
    return backend if isinstance(backend, str) else None


def dist_folder(path: Location) -> tuple[Location, str | None] | None:
    """``(iteration folder, tracker text)``: ``path`` itself, or the folder its tracker names."""
    if _backend(path) == BACKEND and (path / "common.pt").is_file():
        return path, None
    found = tracked_folder(path)
    if found is not None and _backend(found[0]) == BACKEND and (found[0] / "common.pt").is_file():
        return found
    return None


def _common(folder: Location) -> dict[str, Any]:
    root = torch_structure(folder / "common.pt").root
    return root if isinstance(root, dict) else {}


def probe(path: Location) -> Detection | None:
    found = dist_folder(path)
    if found is None:
        return None
    folder, tracker = found
    common = _common(folder)
    names = list(read_metadata(folder).state_dict_metadata)
    optim = [n for n in names if dist_optim.is_optimizer_key(n)]
    evidence = []
    if tracker is not None:
        evidence.append(save_dir_line(path, folder, tracker))
    evidence.append(
        f"{folder.name}/metadata.json: sharded_backend {BACKEND!r} (megatron-core dist_checkpointing)"
    )
    shown = ", ".join(str(k) for k in list(common)[:8])
    evidence.append(f"common.pt: torch.save of the common state ({shown})")
    distcp = sorted(p.name for p in folder.glob("*.distcp"))
    evidence.append(
        f".metadata + {len(distcp)} .distcp file(s) (torch DCP): {len(names) - len(optim)} model "
        f"/ object item(s), {len(optim)} optimizer item(s)"
    )
    kind = "training_state" if optim or "opt_param_scheduler" in common else "model"
    iteration = common.get("iteration", iteration_of(folder))
    detail = f"megatron-core dist_checkpointing (torch_dist), iteration {iteration}"
    return Detection(str(path), FAMILY, kind, tuple(evidence), detail)


def _object_name(fqn: str, layers: int | None, local: bool) -> str:
    """``decoder.layers.mlp.linear_fc1._extra_state/shard_0_2`` -> the layer's own name
    (``decoder.layers.0.mlp.linear_fc1._extra_state``); other objects keep their key."""
    base, _, shard = fqn.partition("/")
    split = stacked_key(base)
    nums = shard.removeprefix("shard_").split("_")
    numbered = len(nums) == 2 and all(n.isdigit() for n in nums)
    if split is not None and numbered and (layers is None or int(nums[1]) == layers):
        return layer_name(split[0], int(nums[0]), split[1], local)
    return fqn


def model_part(
    dist: DistFolder, args: dict[str, Any]
) -> tuple[CheckpointView, list[ModelParam], list[str]]:
    """The model part, its parameters in ``named_parameters()`` order, and what was decided."""
    tensors = {k: v for k, v in dist.tensors().items() if not dist_optim.is_optimizer_key(k)}
    candidates = {k: s for k in tensors if (s := stacked_key(k)) is not None and tensors[k].size}
    layers = layer_count(args, (tensors[k].size[0] for k in candidates))
    stacked = {k: s for k, s in candidates.items() if layers and tensors[k].size[0] == layers}
    extra = [k for k in dist.objects() if EXTRA_STATE in k]
    local, spec_why = is_local_spec(args, (dist.object_value(k) for k in extra))
    records: list[TensorRecord] = []
    params: list[ModelParam] = []
    for key, layer in expand_layers(list(tensors), stacked, layers or 0):
        meta = tensors[key]
        if layer is None:
            name = key
        else:
            head, rest = stacked[key]
            name = layer_name(head, layer, rest, local)
        rec = dist.record(name, key, meta, layer)
        records.append(rec)
        params.append(ModelParam(name, key, layer, rec.shape, rec.dtype))
    values: dict[str, Any] = {}
    for fqn in dist.objects():
        if dist_optim.is_optimizer_key(fqn) or fqn.startswith(RNG_PREFIX):
            continue
        values[_object_name(fqn, layers, local)] = dist.object_value(fqn)
    decided = []
    if stacked:
        heads = sorted({s[0] for s in stacked.values()})
        decided.append(
            f"{len(stacked)} {'/'.join(heads)}.* keys stacked over {layers} layers "
            f"(leading axis; {'args.num_layers' if args.get('num_layers') else 'shared size'}): "
            "listed per layer as <head>.<i>.<rest>"
        )
    if local:
        decided.append(
            f"local layer spec ({spec_why}): linear_qkv.layer_norm_* shown as "
            "input_layernorm.*, linear_fc1.layer_norm_* as pre_mlp_layernorm.*"
        )
    else:
        decided.append(f"keys shown as saved ({spec_why})")
    part = CheckpointView(
        dist.folder,
        Detection(
            str(dist.folder),
            FAMILY,
            "model",
            (f"{len(tensors)} model key(s) in the DCP metadata", *decided),
            "megatron-core model (sharded state dict, global shapes)",
        ),
        files_of(records),
        tuple(records),
        values,
    )
    return part, params, decided


def rng_part(dist: DistFolder) -> CheckpointView | None:
    keys = [k for k in dist.objects() if k.startswith(RNG_PREFIX)]
    if not keys:
        return None
    values: dict[str, Any] = {}
    found: dict[str, str] = {}
    for fqn in keys:
        shard = fqn[len(RNG_PREFIX) :]
        value = dist.object_value(fqn)
        states = value if isinstance(value, list) else [value]
        for state in states:
            if isinstance(state, dict):
                found.update(rng_entries(state))
        values.update({n: v for n, v, _ in flatten(value, prefix=f"{shard}.")})
    kinds = ", ".join(f"{k} ({v})" for k, v in found.items())
    return CheckpointView(
        dist.folder,
        Detection(
            str(dist.folder),
            FAMILY,
            "rng",
            (f"{len(keys)} rng_state object(s) ({', '.join(keys[:4])}): {kinds}",),
            "Megatron RNG states (one rng_state object per pipeline x tensor rank)",
        ),
        (),
        (),
        values,
    )


def open_megatron_dist(path: Location, detection: Detection) -> CheckpointView:
    folder, tracker = found_in(path, dist_folder(path), "a megatron-core torch_dist folder")
    rel = key_prefix(path, folder)
    dist = DistFolder(folder)
    common_path = folder / "common.pt"
    structure = torch_structure(common_path)
    common = structure.root if isinstance(structure.root, dict) else {}
    args = namespace_fields(common.get("args"))
    model, params, decided = model_part(dist, args)
    parts: dict[str, CheckpointView] = {"model": model}
    optimizer, notes = dist_optim.optimizer_part(dist, common_path, structure, args, params)
    if optimizer is not None:
        parts["optimizer"] = optimizer
    parts.update(state_parts(common_path, FAMILY, common, "common.pt"))
    rng = rng_part(dist)
    if rng is not None:
        parts["rng"] = rng
    if "args" in parts:  # args last, as the other parts
        parts["args"] = parts.pop("args")
    files = []
    if tracker is not None:
        files.append(FileInfo("latest_checkpointed_iteration.txt", len(tracker)))
    for name in ("metadata.json", "common.pt", ".metadata"):
        files.append(FileInfo(rel + name, (folder / name).stat().st_size))
    files += [FileInfo(rel + p.name, p.stat().st_size) for p in sorted(folder.glob("*.distcp"))]
    records: list[TensorRecord] = []
    values: dict[str, Any] = {}
    for name, part in parts.items():  # record files are relative to the iteration folder
        records += prefixed(part.tensors, name, rel)
        values.update({f"{name}/{k}": v for k, v in part.values.items()})
    layout = [line] if (line := layout_line(args)) else []
    detection = replace(detection, evidence=(*detection.evidence, *layout, *decided))
    return CheckpointView(
        path, detection, tuple(files), tuple(records), values, parts, warnings=tuple(notes)
    )
