"""The ``zero/`` folder of a DeepSpeed universal checkpoint: one folder per parameter.

``ds_to_universal`` (deepspeed/checkpoint/ds_to_universal.py, DeepSpeed 0.19) writes, per
parameter name ``<p>``:

- ``zero/<p>/fp32.pt`` = ``{'param': <fp32 master, full shape>, 'cat_dim': 0}`` (plus
  ``vocab_tensor`` where vocabulary padding was cut off). A module tensor that had no optimizer
  fragment (a frozen parameter, a buffer, a tied alias) gets ``{'param': <module copy>.float()}``
  only: no ``cat_dim`` and no optimizer states; those are *not* masters.
- ``zero/<p>/<state>.pt`` per optimizer state: ``exp_avg`` / ``exp_avg_sq`` in the same form,
  ``step`` a bare 0-dim tensor.
- ``zero/optimizer_state.pt``: the ZeRO optimizer's common state (``zero_stage``,
  ``partition_count``, ``loss_scaler``, ``clip_grad``, ``param_groups`` whose ``params`` number
  the flat partitions, not parameters).

From ZeRO-3 the per-parameter files are bare 1-D tensors (listed here in the parameter's shape
from ``param_shapes``, the same bytes) and there is no ``step.pt``: ``optimizer_state.pt`` keeps
rank 0's base optimizer state, whose per-sub-group ``step`` is listed for each id of the group.

Ids: id ``k`` is the k-th parameter of the model states' ``param_shapes`` read group by group
(DeepSpeed's trainable parameters in its order, names recorded by DeepSpeed), as for the ZeRO
folder the checkpoint was converted from (readers/deepspeed/zero_layout.py); the param groups keep their
hyperparameters with ``params`` = the ids of their ``param_shapes`` group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ...io.location import Location
from ...io.safe_pickle import LazyTensor
from ...types import Detection, FileInfo, OptimizerInfo, ParamName, TensorRecord
from ...view import CheckpointView
from .. import torch_pickle
from .zero_layout import enum_value

if TYPE_CHECKING:
    import torch

MASTER_FILE = "fp32.pt"
OPTIM_STATE = "optimizer_state.pt"
MAX_PARAMS = 1_000_000


@dataclass
class ZeroFolder:
    """What ``zero/`` holds, listed from the pickles (no tensor bytes read).

    Attributes:
        root: the ``zero`` folder; every ``file`` below is relative to it.
        masters: per parameter folder, its ``fp32.pt`` record named by the folder.
        copies: folders whose ``fp32.pt`` is the module copy cast to fp32 (no optimizer
            fragment: frozen parameters, buffers, tied aliases).
        states: per parameter folder, state name -> record (``exp_avg``, ``step``, ...).
        values: per parameter folder, the plain fields of ``fp32.pt`` (``cat_dim`` ...).
        files: every file, relative to ``root``, with its size.
        common: the plain values of ``optimizer_state.pt``.
        common_records: its tensors (ZeRO-3 keeps rank 0's flats and steps there).
    """

    root: Location
    masters: dict[str, TensorRecord] = field(default_factory=dict)
    copies: set[str] = field(default_factory=set)
    states: dict[str, dict[str, TensorRecord]] = field(default_factory=dict)
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: list[FileInfo] = field(default_factory=list)
    common: dict[str, Any] = field(default_factory=dict)
    common_records: list[TensorRecord] = field(default_factory=list)


def param_folders(zero: Location) -> list[str]:
    """Names of the parameter folders of ``zero`` (those holding ``fp32.pt``), sorted."""
    out = []
    for e in zero.iterdir():
        if (
            not e.name.startswith(".")
            and not e.is_symlink()  # never a link out of the checkpoint
            and e.is_dir()
            and (e / MASTER_FILE).is_file()
        ):
            out.append(e.name)
            if len(out) > MAX_PARAMS:
                break
    return sorted(out)


def _one_file(path: Location, rel: str) -> tuple[TensorRecord | None, dict[str, Any]]:
    """The tensor of one ``zero/<p>/<x>.pt`` file (``param`` of a dict, or a bare tensor)."""
    structure = torch_pickle.torch_structure(path)
    root = structure.root
    if isinstance(root, LazyTensor):
        records, _ = torch_pickle.records_and_values(path, rel, {"param": root}, structure)
        return records[0], {}
    if isinstance(root, dict) and isinstance(root.get("param"), LazyTensor):
        records, values = torch_pickle.records_and_values(path, rel, root, structure)
        param = next(r for r in records if r.name == "param")
        return param, dict(values)
    return None, {}


def _in_shape(record: TensorRecord, shape: tuple[int, ...] | None) -> TensorRecord:
    """A flat record (ZeRO-3) in its parameter's shape; others as they are."""
    if shape is None or tuple(record.shape) == shape or record.numel != math.prod(shape):
        return record
    loader = record.read_values

    def load() -> torch.Tensor:
        assert loader is not None
        return loader().reshape(shape)

    return replace(record, shape=shape, read_values=load if loader is not None else None)


def read_zero_folder(zero: Location, shapes: dict[str, tuple[int, ...]]) -> ZeroFolder:
    """Every parameter folder of ``zero`` and its ``optimizer_state.pt``; ``shapes``: the
    parameters' shapes from the model states (flat ZeRO-3 files are listed in them)."""
    folder = ZeroFolder(zero)
    common = zero / OPTIM_STATE
    if common.is_file():
        structure = torch_pickle.torch_structure(common)
        records, values = torch_pickle.records_and_values(
            common, OPTIM_STATE, structure.root, structure
        )
        folder.common = values
        folder.common_records = records
        folder.files.append(FileInfo(OPTIM_STATE, common.stat().st_size))
    for name in param_folders(zero):
        for file in sorted((zero / name).iterdir()):
            if not file.is_file() or not file.name.endswith(".pt"):
                continue
            rel = f"{name}/{file.name}"
            folder.files.append(FileInfo(rel, file.stat().st_size))
            record, values = _one_file(file, rel)
            if record is None:
                continue
            record = _in_shape(record, shapes.get(name))
            stem = file.name[: -len(".pt")]
            if file.name == MASTER_FILE:
                folder.masters[name] = replace(record, name=name)
                folder.values[name] = values
            else:
                folder.states.setdefault(name, {})[stem] = record
        no_fragment = "cat_dim" not in folder.values.get(name, {}) and name not in folder.states
        if name in folder.masters and no_fragment:
            folder.copies.add(name)
    return folder


def recorded_order(model_values: dict[str, Any]) -> list[tuple[str, int]]:
    """(parameter name, param group) for each id, from ``param_shapes`` (empty when absent)."""
    shapes = model_values.get("param_shapes")
    groups = shapes if isinstance(shapes, list | tuple) else [shapes]
    out: list[tuple[str, int]] = []
    for g, group in enumerate(groups):
        if isinstance(group, dict):
            out += [(str(n), g) for n in group]
    return out


def recorded_shapes(model_values: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Parameter name -> shape from ``param_shapes`` and ``frozen_param_shapes``."""
    out: dict[str, tuple[int, ...]] = {}
    for key in ("param_shapes", "frozen_param_shapes"):
        found = model_values.get(key)
        for group in found if isinstance(found, list | tuple) else [found]:
            if isinstance(group, dict):
                for n, shape in group.items():
                    try:
                        out[str(n)] = tuple(int(d) for d in shape)
                    except (TypeError, ValueError):
                        continue
    return out


def _group_steps(folder: ZeroFolder) -> dict[int, TensorRecord]:
    """Param group -> the ``step`` of its first flat partition in ``optimizer_state.pt``
    (ZeRO-3: the base optimizer steps per sub-group, all parameters of a sub-group alike)."""
    by_name = {r.name: r for r in folder.common_records}
    raw = folder.common.get("optimizer_state_dict.param_groups")
    out: dict[int, TensorRecord] = {}
    for g, group in enumerate(raw if isinstance(raw, list | tuple) else []):
        params = group.get("params") if isinstance(group, dict) else None
        if isinstance(params, list | tuple) and params:
            rec = by_name.get(f"optimizer_state_dict.state.{params[0]}.step")
            if rec is not None and not rec.shape:
                out[g] = rec
    return out


def masters_part(folder: ZeroFolder, family: str) -> CheckpointView:
    """The fp32 master weights, ``<param>`` each (module copies cast to fp32 are left out)."""
    records = [r for n, r in folder.masters.items() if n not in folder.copies]
    values = {f"{n}.{k}": v for n, vals in folder.values.items() for k, v in vals.items()}
    evidence = [
        f"{len(records)} zero/<param>/fp32.pt files with cat_dim or optimizer states: "
        "the fp32 master weights"
    ]
    if folder.copies:
        shown = ", ".join(sorted(folder.copies)[:3])
        evidence.append(
            f"{len(folder.copies)} more fp32.pt written from the module copy ({shown}): "
            "no optimizer fragment (frozen, buffer or tied alias), not listed as masters"
        )
    files = [f for f in folder.files if f.path.endswith("/" + MASTER_FILE)]
    detection = Detection(
        str(folder.root), family, "model", tuple(evidence), "fp32 master weights (ds_to_universal)"
    )
    return CheckpointView(folder.root, detection, tuple(files), tuple(records), values)


def _groups(
    folder: ZeroFolder, order: list[tuple[str, int]], ids: dict[str, int]
) -> tuple[dict[str, Any], ...]:
    raw = folder.common.get("param_groups")
    groups = [dict(g) for g in raw] if isinstance(raw, list | tuple) else []
    members: dict[int, list[int]] = {}
    for name, g in order:
        if name in ids:
            members.setdefault(g, []).append(ids[name])
    if len(groups) != len(members) or sorted(members) != list(range(len(groups))):
        return ({"params": sorted(ids.values())},) if not groups else tuple(groups)
    return tuple({**group, "params": members[g]} for g, group in enumerate(groups))


def optimizer_part(
    folder: ZeroFolder, order: list[tuple[str, int]], source: str, family: str
) -> tuple[CheckpointView, list[str]]:
    """The optimizer: ``state.<id>.<state>`` from the per-parameter files, the param groups
    and common values of ``optimizer_state.pt``; and notes on what does not fit."""
    notes: list[str] = []
    with_states = [n for n in folder.masters if n in folder.states]
    if order:
        names = [n for n, _ in order if n in folder.states]
        missing = [n for n, _ in order if n not in folder.states]
        if missing:
            notes.append(f"{len(missing)} parameter(s) of param_shapes without states in zero/")
        how_source = f"param_shapes in {source}"
    else:
        names = with_states
        how_source = "zero/ folder names (no param_shapes: ids numbered in name order)"
        notes.append("no param_shapes in the model states: ids are numbered in name order")
    ids = {n: i for i, n in enumerate(names)}
    extra = [n for n in with_states if n not in ids]
    if extra:
        notes.append(f"{len(extra)} zero/ folder(s) with states not in param_shapes: {extra[0]}")
    records: list[TensorRecord] = []
    state_names: dict[int, tuple[str, ...]] = {}
    group_of = dict(order)
    steps = _group_steps(folder)
    for name, pid in ids.items():
        states = dict(folder.states[name])
        shared_step = steps.get(group_of.get(name, -1))
        if "step" not in states and shared_step is not None:
            states["step"] = shared_step
        order_of = sorted(states, key=lambda s: (s == "step", s))
        for state in order_of:
            records.append(replace(states[state], name=f"state.{pid}.{state}"))
        state_names[pid] = tuple(order_of)
    values: dict[str, Any] = dict(folder.common)
    groups = _groups(folder, order, ids)
    values["param_groups"] = list(groups)
    if "zero_stage" in values:
        values["zero_stage"] = enum_value(values["zero_stage"])
    info = OptimizerInfo(
        param_groups=groups,
        state_ids=tuple(ids.values()),
        state_names=state_names,
        param_names={pid: n for n, pid in ids.items()},
        name_source=how_source,
        names={pid: ParamName(n, "recorded") for n, pid in ids.items()},
    )
    flats = [r for r in folder.common_records if r.shape]
    if flats:
        notes.append(
            f"{OPTIM_STATE} also holds {len(flats)} flat tensor(s) (rank 0's partitions of "
            "the base optimizer): not listed per parameter"
        )
    stage = values.get("zero_stage")
    evidence = (
        f"{OPTIM_STATE}: ZeRO stage {stage}, {len(groups)} param group(s)",
        f"{len(ids)} parameter(s) with states ("
        + ", ".join(sorted({s for v in state_names.values() for s in v}))
        + ")",
    )
    files = [f for f in folder.files if not f.path.endswith("/" + MASTER_FILE)]
    detection = Detection(
        str(folder.root),
        family,
        "optimizer",
        evidence,
        "optimizer states per parameter (ds_to_universal)",
    )
    view = CheckpointView(  # rooted at zero/, as its files are
        folder.root,
        detection,
        tuple(files),
        tuple(records),
        values,
        optimizer=info,
        warnings=tuple(notes),
    )
    return view, notes
