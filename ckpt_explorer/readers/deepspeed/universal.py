"""DeepSpeed universal checkpoints (``ds_to_universal`` output), read without deepspeed.

``ds_to_universal --input_folder run/global_stepN --output_folder run/global_stepN_universal``
writes the universal folder: the model-states files copied as they are
(``mp_rank_00_model_states.pt``: DeepSpeed's module copy in the training dtype, ``optimizer``
None, ``param_shapes``, ``lr_scheduler``, ``global_steps`` ...; ZeRO-3:
``zero_pp_rank_R_mp_rank_00_model_states.pt`` with placeholder parameters) and ``zero/`` with
one folder per parameter (see :mod:`.universal_params`); beside the tag folders it
writes ``run/latest_universal`` naming the universal tag.

Detection: a folder holding model-states files and ``zero/optimizer_state.pt`` whose content is
DeepSpeed's (``zero_stage`` and ``param_groups``) beside per-parameter ``fp32.pt`` files; it is
probed before the generic DeepSpeed folder (which would take the copied model-states file for a
ZeRO-0 checkpoint). A save folder whose ``latest_universal`` names such a folder is one too,
unless its ``latest`` names an existing tag: then it is the ZeRO checkpoint DeepSpeed loads by
default (family ``deepspeed``; formats/precedence.py) and the universal folder is opened by its
own path.

The view lists ``model/<name>`` (the module copy, each parameter once); its parts are the
model-states file split as for a DeepSpeed tag (model, ``:lr_scheduler``, ``:run_state``), the
fp32 masters (``zero/*/fp32.pt``, kind model) and the optimizer (``zero/optimizer_state.pt``:
per-parameter states with recorded names).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ...io.location import Location
from ...io.paths import found_in, key_prefix, resolve_inside
from ...io.safe_pickle import OpaqueObject
from ...types import Detection, FileInfo, TensorRecord
from ...view import CheckpointView, prefixed
from .. import roles, torch_pickle
from .parts import ENGINE_COUNTERS, ITEMSIZE, split_model_states
from .universal_params import (
    OPTIM_STATE,
    ZeroFolder,
    masters_part,
    optimizer_part,
    param_folders,
    read_zero_folder,
    recorded_order,
    recorded_shapes,
)
from .zero_layout import enum_value

FAMILY = "deepspeed-universal"
LATEST = "latest_universal"
ZERO = "zero"
MODEL_FILE = re.compile(r"^(?:zero_pp_rank_(\d+)_)?mp_rank_(\d+)_model_states\.pt$")


def _model_files(folder: Location) -> list[str]:
    names = [p.name for p in folder.iterdir() if p.is_file() and MODEL_FILE.match(p.name)]
    return sorted(names, key=lambda n: tuple(int(x) for x in re.findall(r"\d+", n)))


def _common_state(folder: Location) -> dict[str, Any] | None:
    """The root of ``zero/optimizer_state.pt`` when it is DeepSpeed's common optimizer state."""
    root = torch_pickle.torch_root(folder / ZERO / OPTIM_STATE)
    if isinstance(root, dict) and "zero_stage" in root and "param_groups" in root:
        return root
    return None


def _folder_evidence(folder: Location) -> list[str] | None:
    """Why ``folder`` is a universal folder (None when it is not one)."""
    models = _model_files(folder)
    if not models or not (folder / ZERO).is_dir():
        return None
    common = _common_state(folder)
    if common is None:
        return None
    params = param_folders(folder / ZERO)
    if not params:
        return None
    groups = common.get("param_groups")
    n_groups = len(groups) if isinstance(groups, list | tuple) else "?"
    return [
        f"zero/{OPTIM_STATE} with zero_stage {enum_value(common['zero_stage'])!r} and "
        f"{n_groups} param group(s) → DeepSpeed universal checkpoint (ds_to_universal)",
        f"{len(params)} parameter folder(s) zero/<name>/fp32.pt ({params[0]}, ...)",
        f"{len(models)} model-states file(s) ({models[0]}): DeepSpeed's module copy",
    ]


def _read_tag(path: Location) -> str | None:
    latest = path / LATEST
    if not latest.is_file() or latest.stat().st_size > 4096:
        return None
    return latest.read_text(encoding="utf-8", errors="replace").strip() or None


def universal_dir(path: Location) -> tuple[Location, str | None, list[str]] | None:
    """(the universal folder, the tag ``latest_universal`` names when ``path`` is the save
    folder, evidence) for ``path``; None when it is neither. A save folder whose ``latest``
    names a ZeRO tag is DeepSpeed's checkpoint first (formats/precedence.py)."""
    evidence = _folder_evidence(path)
    if evidence is not None:
        if _read_tag(path.parent) == path.name:
            evidence.insert(0, f"'{LATEST}' in the save folder names this folder")
        return path, None, evidence
    tag = _read_tag(path)
    if tag is None:
        return None
    folder = resolve_inside(path, tag, path / LATEST)
    if not folder.is_dir():
        return None
    evidence = _folder_evidence(folder)
    if evidence is None:
        return None
    found = "no 'latest'" if not (path / "latest").is_file() else "'latest' names no tag folder"
    return folder, tag, [f"'{LATEST}' names tag {tag!r} ({found})", *evidence]


def probe(path: Location) -> Detection | None:
    found = universal_dir(path)
    return None if found is None else universal_detection(path, found)


def universal_detection(path: Location, found: tuple[Location, str | None, list[str]]) -> Detection:
    """The Detection of ``path`` from what :func:`universal_dir` found."""
    folder, tag, evidence = found
    common = _common_state(folder) or {}
    detail = f"ZeRO-{enum_value(common.get('zero_stage'))} universal checkpoint" + (
        f", tag {tag}" if tag else ""
    )
    return Detection(str(path), FAMILY, "training_state", tuple(evidence), detail)


def _from_masters(
    r: TensorRecord, master: TensorRecord, zero_rel: str, model: CheckpointView
) -> TensorRecord:
    """A ZeRO-3 placeholder of the module copy, read from its fp32 master (cast back)."""
    from .zero_layout import slice_read_values

    shape = tuple(master.shape)
    n = master.numel
    same = master.dtype == r.dtype
    return TensorRecord(
        r.name,
        r.dtype,
        shape,
        n * ITEMSIZE.get(r.dtype, 4),
        zero_rel + master.file,
        master.offset if same else None,
        None,
        slice_read_values([(model, master, 0, n)], shape, r.dtype),
    )


def _module_records(
    model: CheckpointView, folder: ZeroFolder, zero_rel: str
) -> tuple[list[TensorRecord], int]:
    """The model-states records with placeholders (ZeRO-3) replaced by the masters."""
    out, replaced = [], 0
    for r in model.tensors:
        name = r.name.removeprefix("module.")
        master = folder.masters.get(name)
        if r.name.startswith("module.") and master is not None and r.numel != master.numel:
            out.append(_from_masters(r, master, zero_rel, model))
            replaced += 1
        else:
            out.append(r)
    return out, replaced


def _args_part(model: CheckpointView, rel: str) -> CheckpointView | None:
    """The training arguments a client saved into the model states (Megatron-DeepSpeed's
    ``args`` Namespace), kind args; None when there are none."""
    found = model.values.get("args")
    is_args, evidence = roles.is_training_args(found)
    if not is_args or not isinstance(found, OpaqueObject):
        return None
    state = found.state if isinstance(found.state, dict) else {}
    detection = Detection(
        str(model.path), model.family, "args", (f"'args' in {rel}: {evidence}",), "training args"
    )
    return CheckpointView(model.path, detection, (), (), {str(k): v for k, v in state.items()})


def _run_facts(values: dict[str, Any]) -> str:
    facts = [f"{k} {values[k]}" for k in ENGINE_COUNTERS if k in values]
    sched = values.get("lr_scheduler")
    if isinstance(sched, dict):
        for key in ("last_epoch", "last_batch_iteration", "_step_count"):
            if key in sched:
                facts.append(f"lr_scheduler.{key} {sched[key]}")
    return ", ".join(facts) or "no run position"


def open_universal(path: Location, detection: Detection) -> CheckpointView:
    expected = "a DeepSpeed universal checkpoint folder"
    folder_path, tag, _ = found_in(path, universal_dir(path), expected)
    rel_dir = key_prefix(path, folder_path)
    files: list[FileInfo] = []
    values: dict[str, Any] = {}
    if tag is not None:
        values[LATEST] = tag
        files.append(FileInfo(LATEST, (path / LATEST).stat().st_size))
    model_names = _model_files(folder_path)
    opened: list[tuple[str, CheckpointView]] = []
    for name in model_names:
        file = folder_path / name
        part_detection = torch_pickle.probe(file)
        if part_detection is not None:
            opened.append((name, torch_pickle.open_torch(file, part_detection)))
            files.append(FileInfo(rel_dir + name, file.stat().st_size))
    first = opened[0][1].values if opened else {}
    order = recorded_order(first)
    zero = read_zero_folder(folder_path / ZERO, recorded_shapes(first))
    parts: dict[str, CheckpointView] = {}
    records: list[TensorRecord] = []
    warnings: list[str] = []
    for i, (name, view) in enumerate(opened):
        recs, replaced = _module_records(view, zero, ZERO + "/")
        split = split_model_states(view, recs, rel_dir + name)
        if i > 0:  # other ranks' copies (tensor / ZeRO-3 data parallel): the file alone
            parts[rel_dir + name] = split[rel_dir + name]
            continue
        parts.update(split)
        args = _args_part(view, rel_dir + name)
        if args is not None:
            parts[f"{rel_dir}{name}:args"] = args
        if replaced:
            warnings.append(
                f"{name} holds ZeRO-3 placeholders: {replaced} module tensor(s) read from "
                "their fp32 masters (cast to the module dtype)"
            )
        module = [r for r in split[rel_dir + name].tensors if r.name.startswith("module.")]
        renamed = [replace(r, name=r.name.removeprefix("module.")) for r in module]
        records += prefixed(tuple(renamed), "model", rel_dir)
        for key in (*ENGINE_COUNTERS, "ds_version", "dp_world_size", "mp_world_size"):
            if key in view.values:
                values[key] = view.values[key]
        detection = replace(
            detection, evidence=(*detection.evidence, f"{name}: {_run_facts(view.values)}")
        )
    if any(int(m.group(2)) for n in model_names if (m := MODEL_FILE.match(n))):
        warnings.append(
            "several model-parallel ranks: model/ is rank 0's slice of the module copy; the "
            "fp32 masters in zero/ are merged across ranks"
        )
    files += [FileInfo(f"{rel_dir}{ZERO}/{f.path}", f.nbytes) for f in zero.files]
    masters = masters_part(zero, FAMILY)
    source = model_names[0] if model_names else "the model states"
    optim, notes = optimizer_part(zero, order, source, FAMILY)
    warnings += notes
    if "zero_stage" in optim.values:
        values["zero_stage"] = optim.values["zero_stage"]
    parts[f"{rel_dir}{ZERO}/*/fp32.pt"] = masters
    parts[f"{rel_dir}{ZERO}/{OPTIM_STATE}"] = optim
    return CheckpointView(
        path, detection, tuple(files), tuple(records), values, parts, warnings=tuple(warnings)
    )
