"""DeepSpeed checkpoint folders (``latest`` + ``global_stepN/``), read without deepspeed.

DeepSpeed pickles its own classes (``ZeroStageEnum``, ``LossScaler``) into optimizer files;
the allow-list unpickler keeps them as inert placeholders. The view lists ``model/<name>`` with
each parameter's true shape (ZeRO-3 placeholders replaced, see :mod:`.parts`); its
parts are the files, the model-states file split into model / optimizer (ZeRO-0) / scheduler /
run-state parts, and rank 0's optimizer file carrying per-parameter views and recorded names.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Any

from ...errors import CkptExplorerError
from ...io.location import Location
from ...io.paths import found_in, key_prefix, resolve_inside
from ...types import Detection, FileInfo, TensorRecord
from ...view import CheckpointView, prefixed
from .. import torch_pickle
from .parts import (
    ENGINE_COUNTERS,
    layout_or_note,
    model_records,
    optimizer_part,
    split_model_states,
)
from .zero_layout import enum_value

MODEL_FILE = re.compile(r"(?:zero_pp_rank_\d+_)?mp_rank_\d+_model_states\.pt$")
OPTIM_FILE = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
LAYER_FILE = re.compile(r"layer_\d+-model_\d+-model_states\.pt$")
# What save_checkpoint writes beside the tag folders (the scripts are copied there by rank 0)
SAVE_DIR_FILES = frozenset({"latest", "latest_universal", "zero_to_fp32.py", "zero_to_torch.py"})


def _holds_states(folder: Location) -> bool:
    return any(MODEL_FILE.search(p.name) for p in folder.iterdir() if p.is_file())


def _tag_dir(path: Location) -> tuple[Location, str | None] | None:
    """The folder that holds the state files, and the tag read from ``latest``."""
    latest = path / "latest"
    if latest.is_file() and latest.stat().st_size < 4096:
        tag = latest.read_text(encoding="utf-8", errors="replace").strip()
        if tag:
            tag_dir = resolve_inside(path, tag, latest)
            if tag_dir.is_dir():
                return tag_dir, tag
    if _holds_states(path):
        return path, None
    return None


def latest_tag(path: Location) -> str | None:
    """The tag that ``latest`` in ``path`` names, when that tag folder exists."""
    try:
        found = _tag_dir(path)
    except (CkptExplorerError, OSError):
        return None
    return found[1] if found is not None else None


def beside_other_files(path: Location) -> bool:
    """Whether the save folder holds more than DeepSpeed wrote around its tags (HF Trainer's
    ``checkpoint-N``: weights, ``scheduler.pt``, ``rng_state.pth`` ...): then it may be that
    tool's training state, the tag folder one of its parts (formats/precedence.py decides)."""
    others = [
        c
        for c in path.iterdir()
        if not c.name.startswith(".")
        and c.name not in SAVE_DIR_FILES
        and not (c.is_dir() and _holds_states(c))
    ]
    return bool(others)


def probe(path: Location) -> Detection | None:
    found = _tag_dir(path)
    if found is None:
        return None
    tag_dir, tag = found
    names = sorted(p.name for p in tag_dir.iterdir())
    models = [n for n in names if MODEL_FILE.search(n) or LAYER_FILE.search(n)]
    optims = [n for n in names if OPTIM_FILE.search(n)]
    if not models:
        return None
    evidence = []
    if tag is not None:
        evidence.append(f"'latest' names tag {tag!r}")
    evidence.append(f"{len(models)} model-states file(s) ({models[0]})")
    if optims:
        evidence.append(f"{len(optims)} ZeRO optimizer-states file(s) ({optims[0]})")
    return Detection(
        str(path), "deepspeed", "training_state", tuple(evidence), f"tag {tag}" if tag else ""
    )


def _rank_order(name: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", name))


def _without_optimizer(view: CheckpointView) -> CheckpointView:
    return CheckpointView(
        view.path, view.detection, view.files, view.tensors, view.values, view.parts, None
    )


def open_deepspeed(path: Location, detection: Detection) -> CheckpointView:
    tag_dir, tag = found_in(path, _tag_dir(path), "a DeepSpeed tag folder")
    rel_dir = key_prefix(path, tag_dir)
    raw: dict[str, CheckpointView] = {}
    files: list[FileInfo] = []
    values: dict[str, Any] = {}
    if tag is not None:
        values["latest"] = tag
        files.append(FileInfo("latest", (path / "latest").stat().st_size))
    for file in sorted(tag_dir.iterdir()):
        if not file.is_file() or not file.name.endswith(".pt"):
            continue
        detection_part = torch_pickle.probe(file)
        if detection_part is None:
            continue
        raw[rel_dir + file.name] = torch_pickle.open_torch(file, detection_part)
        files.append(FileInfo(rel_dir + file.name, file.stat().st_size))
    # The module: mp_rank_00 (ZeRO 0-2), else dp rank 0's ZeRO-3 file; optimizer files by rank.
    model_names = sorted(
        (n for n in raw if MODEL_FILE.search(n)),
        key=lambda n: (
            PurePosixPath(n).name.startswith("zero_pp_rank_"),
            _rank_order(PurePosixPath(n).name),
        ),
    )
    optim_names = sorted(
        (n for n in raw if OPTIM_FILE.search(n)), key=lambda n: _rank_order(PurePosixPath(n).name)
    )
    warnings: list[str] = []
    layout = None
    if model_names:
        layout, note = layout_or_note(raw[model_names[0]], [raw[n] for n in optim_names])
        if note:
            warnings.append(note)
    models = [raw[n] for n in model_names]
    parts: dict[str, CheckpointView] = {}
    records: list[TensorRecord] = []
    for rel, view in raw.items():
        if rel in model_names:
            recs, notes = model_records(view, layout, models)
            warnings += notes if rel == model_names[0] else []
            split = split_model_states(view, recs, rel)
            parts.update(split)
            if rel == model_names[0]:
                module = [r for r in split[rel].tensors if r.name.startswith("module.")]
                renamed = [replace(r, name=r.name.removeprefix("module.")) for r in module]
                records += prefixed(tuple(renamed), "model", rel_dir)
                for key in (*ENGINE_COUNTERS, "ds_version", "dp_world_size", "mp_world_size"):
                    if key in view.values:
                        values[key] = view.values[key]
                config = view.values.get("ds_config")
                if isinstance(config, dict) and "zero_stage" not in values:
                    zero = config.get("zero_optimization")
                    values["zero_stage"] = zero.get("stage", 0) if isinstance(zero, dict) else 0
        elif OPTIM_FILE.search(rel):
            stage = view.values.get("optimizer_state_dict.zero_stage")
            if stage is not None:
                values["zero_stage"] = enum_value(stage)
            if layout is not None and rel == optim_names[0]:
                parts[rel] = optimizer_part(view, layout, PurePosixPath(model_names[0]).name)
            else:  # flat partitions only: ids are partitions, never to be aligned with params
                parts[rel] = _without_optimizer(view)
        else:
            parts[rel] = view
    return CheckpointView(
        path, detection, tuple(files), tuple(records), values, parts, warnings=tuple(warnings)
    )
