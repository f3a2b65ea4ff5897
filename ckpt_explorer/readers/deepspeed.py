"""DeepSpeed checkpoint folders (``latest`` + ``global_stepN/``), read without deepspeed.

DeepSpeed pickles its own classes (``ZeroStageEnum``, ``LossScaler``) into optimizer files;
the allow-list unpickler keeps them as inert placeholders.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import CorruptCheckpointError
from ..io.paths import resolve_inside
from ..io.safe_pickle import OpaqueObject
from ..types import Detection, FileInfo, TensorRecord
from ..view import CheckpointView, prefixed
from . import torch_pickle

MODEL_FILE = re.compile(r"(?:zero_pp_rank_\d+_)?mp_rank_\d+_model_states\.pt$")
OPTIM_FILE = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
LAYER_FILE = re.compile(r"layer_\d+-model_\d+-model_states\.pt$")


def _tag_dir(path: Path) -> tuple[Path, str | None] | None:
    """The folder that holds the state files, and the tag read from ``latest``."""
    latest = path / "latest"
    if latest.is_file() and latest.stat().st_size < 4096:
        tag = latest.read_text(encoding="utf-8", errors="replace").strip()
        if tag:
            tag_dir = resolve_inside(path, tag, latest)
            if tag_dir.is_dir():
                return tag_dir, tag
    if any(MODEL_FILE.search(p.name) for p in path.iterdir() if p.is_file()):
        return path, None
    return None


def probe(path: Path) -> Detection | None:
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


def _enum_value(obj: Any) -> Any:
    if isinstance(obj, OpaqueObject) and obj.args:
        return obj.args[0]
    return obj


def open_deepspeed(path: Path, detection: Detection) -> CheckpointView:
    found = _tag_dir(path)
    if found is None:
        raise CorruptCheckpointError(path, "a DeepSpeed tag folder", "none")
    tag_dir, tag = found
    rel_dir = "" if tag_dir == path else tag_dir.relative_to(path).as_posix() + "/"
    parts: dict[str, CheckpointView] = {}
    files: list[FileInfo] = []
    records: list[TensorRecord] = []
    values: dict[str, Any] = {}
    if tag is not None:
        values["latest"] = tag
        files.append(FileInfo("latest", (path / "latest").stat().st_size))
    # The module weights: mp_rank_00 (ZeRO 0-2), else dp rank 0's ZeRO-3 file (placeholders).
    model_files = sorted(
        (p.name for p in tag_dir.iterdir() if MODEL_FILE.search(p.name)),
        key=lambda n: (n.startswith("zero_pp_rank_"), _rank_order(n)),
    )
    for file in sorted(tag_dir.iterdir()):
        if not file.is_file() or not file.name.endswith(".pt"):
            continue
        detection_part = torch_pickle.probe(file)
        if detection_part is None:
            continue
        view = torch_pickle.open_torch(file, detection_part)
        rel = rel_dir + file.name
        parts[rel] = view
        files.append(FileInfo(rel, file.stat().st_size))
        if file.name in model_files[:1]:
            module = [r for r in view.tensors if r.name.startswith("module.")]
            renamed = [replace(r, name=r.name.removeprefix("module.")) for r in module]
            records += prefixed(tuple(renamed), "model", rel_dir)
            for key in ("global_steps", "ds_version", "dp_world_size", "mp_world_size"):
                if key in view.values:
                    values[key] = view.values[key]
            config = view.values.get("ds_config")
            if isinstance(config, dict) and "zero_stage" not in values:
                zero = config.get("zero_optimization")
                values["zero_stage"] = zero.get("stage", 0) if isinstance(zero, dict) else 0
        optim = OPTIM_FILE.search(file.name)
        if optim:
            stage = view.values.get("optimizer_state_dict.zero_stage")
            if stage is not None:
                values["zero_stage"] = _enum_value(stage)
    return CheckpointView(path, detection, tuple(files), tuple(records), values, parts)
