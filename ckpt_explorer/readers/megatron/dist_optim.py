"""The optimizer of a megatron-core dist checkpoint, per parameter, under megatron-core's ids.

Three layouts (megatron/core/optimizer/optimizer.py and distrib_optimizer.py):

- the plain optimizer (``FP32Optimizer``; ``Float16OptimizerWithFloat16Params`` adds its fp32
  masters as ``fp32_param``): DCP tensors ``optimizer.state.<state>.<key>`` with the global
  shape of the parameter saved under ``<key>``; ``common.pt`` holds the torch
  ``param_groups`` without ``params`` lists and one ``state.common_step`` for all
  parameters (per-parameter steps are not supported there);
- the ``DistributedOptimizer`` with ``fully_reshardable`` parameter state: DCP tensors
  ``optimizer.state.param|exp_avg|exp_avg_sq.<key>`` (the fp32 main parameter and moments, in
  the parameter's global shape); ``common.pt``'s ``optimizer.optimizer.param_groups`` carry
  ``step``;
- the ``DistributedOptimizer`` with ``dp_reshardable`` state (Megatron-LM's default): flat
  per-bucket buffers ``optimizer.distributed.dp_group_idx_G.gbuf_idx_B.dtype_(...).
  bucket_idx_K.param|exp_avg|exp_avg_sq`` with the groups in a ``.optimizer`` object. Which
  parameter each range of a buffer holds is not recorded in the checkpoint, so the states are
  listed as the buffers and no id is named.

For the first two, every state becomes ``state.<id>.<state>`` (a stacked key gives one record
per layer, loading that layer only), ``step`` joins each id (an alias of ``common_step``, or
the group's ``step``), ids follow :mod:`.ids` and every id's name is ``recorded``
(the sharded key says which parameter a state belongs to).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ...io.location import Location
from ...io.raw_values import record_scalar
from ...io.torch_file import TorchFileStructure
from ...types import Detection, OptimizerInfo, ParamName, TensorRecord
from ...view import CheckpointView
from ..torch_pickle import records_and_values
from .common import files_of
from .dist_folder import DistFolder, ModelParam
from .ids import Numbering, Param, file_order_agrees, number_ids

FAMILY = "megatron-dist"
OPTIM_KEY = re.compile(r"^(?:chained_\d+\.)?optimizer\.")
STATE_KEY = re.compile(
    r"^(?:chained_\d+\.)?optimizer\.state\.(?P<state>[A-Za-z0-9_]+)\.(?P<key>.+)$"
)
FLAT_KEY = re.compile(r"^(?:chained_\d+\.)?optimizer\.distributed\.")
SOURCE = "sharded keys of the dist checkpoint (optimizer.state.<state>.<key>)"
FLAT_NOTE = (
    "DistributedOptimizer (dp_reshardable): the states are flat per-bucket buffers "
    "(optimizer/distributed.*); which parameter each range holds is not recorded in this "
    "checkpoint, so no state is listed per parameter and no id is named"
)
PADDING_NOTE = (
    "the buffers hold each parameter's range and the alignment padding between ranges "
    "(uninitialised memory: values there mean nothing)"
)


def is_optimizer_key(key: str) -> bool:
    return bool(OPTIM_KEY.match(key))


def _optimizer_dicts(common: dict[str, Any]) -> list[dict[str, Any]]:
    """The torch optimizer state dict(s) in ``common.pt`` (one per chained optimizer)."""
    opt = common.get("optimizer")
    if not isinstance(opt, dict):
        return []
    if isinstance(opt.get("param_groups"), list):
        return [opt]
    inner = opt.get("optimizer")
    if isinstance(inner, dict) and isinstance(inner.get("param_groups"), list):
        return [inner]
    out: list[dict[str, Any]] = []
    for k in sorted((k for k in opt if isinstance(k, int)), key=int):
        out += _optimizer_dicts({"optimizer": opt[k]})
    return out


def sharding_type(common: dict[str, Any]) -> str | None:
    opt = common.get("optimizer")
    found = opt.get("param_state_sharding_type") if isinstance(opt, dict) else None
    meta = common.get("content_metadata")
    if found is None and isinstance(meta, dict):
        found = meta.get("distrib_optim_sharding_type")
    return found if isinstance(found, str) else None


def optimizer_part(
    dist: DistFolder,
    common_path: Location,
    structure: TorchFileStructure,
    args: dict[str, Any],
    params: list[ModelParam],
) -> tuple[CheckpointView | None, list[str]]:
    """The optimizer part (None when no optimizer was saved) and notes for the view."""
    common = structure.root if isinstance(structure.root, dict) else {}
    tensors = dist.tensors()
    if any(FLAT_KEY.match(k) for k in list(tensors) + dist.objects()):
        return _flat_part(dist, common), [FLAT_NOTE]
    parsed = [(k, m.group("state"), m.group("key")) for k in tensors if (m := STATE_KEY.match(k))]
    sdicts = _optimizer_dicts(common)
    if not parsed and not sdicts:
        return None, []
    notes: list[str] = []
    by_key: dict[str, list[ModelParam]] = {}
    for p in params:
        by_key.setdefault(p.key, []).append(p)
    orphans = sorted({key for _, _, key in parsed if key not in by_key})
    if orphans:
        notes.append(f"optimizer states of keys the model does not save: {', '.join(orphans[:4])}")
    stated = {key for _, _, key in parsed}
    trainable = [p for p in params if p.key in stated]
    sharding = sharding_type(common)
    groups = [dict(g) for d in sdicts for g in d["param_groups"] if isinstance(g, dict)]
    numbering = None
    if len(sdicts) == 1:
        plain = [Param(p.name, p.shape, p.dtype) for p in trainable]
        numbering = number_ids(plain, groups, args, distributed=sharding is not None)
    if numbering is None:
        numbering = Numbering({p.name: i for i, p in enumerate(trainable)}, [])
        notes.append(
            "optimizer ids numbered in model order: megatron-core's group rule does not decide "
            f"every parameter's group ({len(sdicts)} optimizer(s), {len(groups)} group(s))"
        )
    else:
        walk = [p.name for p in trainable]
        walk = walk[::-1] if sharding else sorted(walk, key=numbering.ids.__getitem__)
        first_seen = list(dict.fromkeys(key for _, _, key in parsed))
        key_of = {p.name: p.key for p in trainable}
        if not file_order_agrees(first_seen, walk, key_of):
            notes.append(
                "the optimizer keys in .metadata are not in the order the id rule walks them: "
                "ids may differ from the live optimizer's (names are recorded either way)"
            )
    ids = numbering.ids
    step_rec = _common_step(common_path, structure, sdicts)
    per_id: dict[int, dict[str, TensorRecord]] = {}
    values: dict[str, Any] = {}
    for fqn, state, key in parsed:
        for p in by_key.get(key, []):
            pid = ids[p.name]
            per_id.setdefault(pid, {})[state] = dist.record(
                f"state.{pid}.{state}", fqn, tensors[fqn], p.layer
            )
    group_step = {i: g.get("step") for i, g in enumerate(groups) if "step" in g}
    records: list[TensorRecord] = []
    state_names: dict[int, tuple[str, ...]] = {}
    for pid in sorted(per_id):
        names = list(per_id[pid])
        if step_rec is not None:
            records.append(replace(step_rec, name=f"state.{pid}.step"))
            names.insert(0, "step")
        elif numbering.groups:
            g = next(i for i, members in enumerate(numbering.groups) if pid in members)
            if g in group_step:
                values[f"state.{pid}.step"] = group_step[g]
                names.insert(0, "step")
        records += per_id[pid].values()
        state_names[pid] = tuple(names)
    if numbering.groups:
        groups = [{**g, "params": ids} for g, ids in zip(groups, numbering.groups, strict=True)]
    values["param_groups"] = groups
    if step_rec is not None:
        values["common_step"] = record_scalar(step_rec)
    by_id = {pid: name for name, pid in ids.items()}
    rule = "DistributedOptimizer: buffer order" if sharding else "model order per group"
    info = OptimizerInfo(
        param_groups=tuple(groups),
        state_ids=tuple(sorted(per_id)),
        state_names=state_names,
        param_names=by_id,
        name_source=f"{SOURCE}; ids as megatron-core numbers them ({rule})",
        names={pid: ParamName(name, "recorded") for pid, name in by_id.items()},
    )
    states = sorted({s for _, s, _ in parsed})
    evidence = [
        f"{len(parsed)} optimizer.state.<state>.<key> tensor(s) ({', '.join(states)}) for "
        f"{len(stated)} saved key(s) = {len(per_id)} parameter(s)",
        f"{len(groups)} param group(s) in common.pt"
        + (", one common_step for all parameters" if step_rec is not None else "")
        + (f", parameter state {sharding}" if sharding else ""),
        "ids: megatron-core's _get_param_groups (no weight decay for biases and 1-D "
        "parameters), numbered group by group "
        + ("in the DDP buffer's order (reverse model order)" if sharding else "in model order"),
    ]
    detail = (
        f"megatron-core DistributedOptimizer ({sharding}): per-parameter main params and moments"
        if sharding
        else "megatron-core optimizer, states keyed by parameter"
    )
    view = CheckpointView(
        dist.folder,
        Detection(str(dist.folder), FAMILY, "optimizer", tuple(evidence), detail),
        files_of(records),
        tuple(records),
        values,
        optimizer=info,
    )
    return view, notes


def _common_step(
    path: Location, structure: TorchFileStructure, sdicts: list[dict[str, Any]]
) -> TensorRecord | None:
    """The record of ``state.common_step`` in ``common.pt`` (a tensor), if one is saved."""
    if len(sdicts) != 1:
        return None
    state = sdicts[0].get("state")
    if not isinstance(state, dict) or "common_step" not in state:
        return None
    records, _ = records_and_values(
        path, path.name, {"common_step": state["common_step"]}, structure
    )
    return records[0] if records else None


def _flat_part(dist: DistFolder, common: dict[str, Any]) -> CheckpointView:
    tensors = dist.tensors()
    records = [
        dist.record(fqn.split("optimizer.", 1)[1], fqn, meta)
        for fqn, meta in tensors.items()
        if FLAT_KEY.match(fqn)
    ]
    values: dict[str, Any] = {}
    groups: list[dict[str, Any]] = []
    for fqn in dist.objects():
        if not FLAT_KEY.match(fqn):
            continue
        value = dist.object_value(fqn)
        name = fqn.split("optimizer.", 1)[1].partition("/")[0]
        values[name] = value
        if isinstance(value, dict) and isinstance(value.get("param_groups"), list):
            groups += [dict(g) for g in value["param_groups"] if isinstance(g, dict)]
    values["param_groups"] = groups
    info = OptimizerInfo(
        param_groups=tuple(groups), state_ids=(), state_names={}, flat=FLAT_NOTE, padded=True
    )
    sharding = sharding_type(common) or "dp_reshardable"
    return CheckpointView(
        dist.folder,
        Detection(
            str(dist.folder),
            FAMILY,
            "optimizer",
            (
                f"{len(records)} flat optimizer.distributed.* buffer(s), parameter state "
                f"{sharding}",
                f"{len(groups)} param group(s) in the .optimizer object",
                PADDING_NOTE,
            ),
            f"megatron-core DistributedOptimizer ({sharding}): flat per-bucket buffers",
        ),
        files_of(records),
        tuple(records),
        values,
        optimizer=info,
    )
