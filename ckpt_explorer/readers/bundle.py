"""Training-state folders: model, optimizer, scheduler and RNG/run state side by side.

Recognised by what the children *are* (each detected by content), not by their names:
ColossalChat's ``epoch-E_step-S/{modeling, optimizer, lr_scheduler, running_states.json}``,
``model/ optim/ lr_scheduler meta.pt``, or an HF Trainer ``checkpoint-N`` folder whose own
weights sit beside ``optimizer.pt``, ``scheduler.pt`` and ``rng_state.pth``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import CkptExplorerError
from ..formats.registry import FormatSpec, specs
from ..types import Detection, FileInfo, TensorRecord
from ..view import CheckpointView, prefixed
from .hf_folder import WEIGHT_FILES
from .optimizer_info import infer_param_names, keeps_parameter_order, state_shapes
from .sharded_index import TMP_DIR, find_index, load_index

STATE_KINDS = {"model", "optimizer", "scheduler", "rng", "running_state", "adapter"}
MAX_CHILDREN = 64
OWN_MODEL_FAMILIES = ("hf-sharded", "colossalai-sharded-model", "hf-single")
IGNORED = {
    "config.json",
    "generation_config.json",
    "trainer_state.json",
    "training_args.bin",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "latest",
}


def _own_model_files(path: Path) -> set[str]:
    """Files that belong to a model stored directly in ``path`` (index + shards)."""
    owned: set[str] = set()
    indexes = find_index(path)
    if indexes:
        owned.add(indexes[0].name)
        owned.update(load_index(indexes[0]).weight_map.values())
    owned.update(n for n in WEIGHT_FILES if (path / n).is_file())
    return owned


def _detect_child(child: Path, target: str) -> tuple[Detection, FormatSpec] | None:
    for spec in specs(target):
        if spec.name == "training-state":
            continue
        try:
            detection = spec.probe(child)
        except (CkptExplorerError, OSError):
            return None
        if detection is not None:
            return detection, spec
    return None


def find_parts(path: Path) -> dict[str, tuple[Path, Detection, FormatSpec]]:
    """Name -> (path, detection, spec) of the state parts in ``path``."""
    parts: dict[str, tuple[Path, Detection, FormatSpec]] = {}
    children = [c for c in sorted(path.iterdir()) if not c.name.startswith(".")]
    if len(children) > MAX_CHILDREN:
        return {}
    own = _detect_child(path, "dir")
    owned: set[str] = set()
    if own is not None and own[0].family in OWN_MODEL_FAMILIES:
        parts["model"] = (path, *own)
        owned = _own_model_files(path)
    for child in children:
        if child.name in owned or child.name in IGNORED or child.name == TMP_DIR:
            continue
        found = _detect_child(child, "dir" if child.is_dir() else "file")
        if found is not None and found[0].kind in STATE_KINDS:
            name = child.name if child.name not in parts else f"{child.name}#2"
            parts[name] = (child, *found)
    return parts


def probe(path: Path) -> Detection | None:
    parts = find_parts(path)
    kinds = {d.kind for _, d, _ in parts.values()}
    if len(parts) < 2 or len(kinds) < 2 or not kinds & {"model", "optimizer"}:
        return None
    evidence = [f"{name} → {d.family} ({d.kind})" for name, (_, d, _) in parts.items()]
    return Detection(
        str(path),
        "training-state",
        "training_state",
        (f"{len(parts)} state parts side by side", *evidence),
        ", ".join(sorted(kinds)),
    )


def open_bundle(path: Path, detection: Detection) -> CheckpointView:
    views: dict[str, CheckpointView] = {}
    for name, (child, part_detection, spec) in find_parts(path).items():
        views[name] = spec.open(child, part_detection)
    model = next(
        (
            v
            for v in views.values()
            if v.kind == "model" and keeps_parameter_order(v.family, (f.path for f in v.files))
        ),
        None,
    )
    for name, view in list(views.items()):
        if view.optimizer is not None and not view.optimizer.param_names and model is not None:
            views[name] = view.with_optimizer(
                infer_param_names(view.optimizer, state_shapes(view.tensors), model.tensors)
            )
    records: list[TensorRecord] = []
    files: list[FileInfo] = []
    values: dict[str, Any] = {}
    for name, view in views.items():
        base = "" if view.path == path else view.path.relative_to(path).as_posix()
        file_prefix = "" if not base or view.path.is_file() else base + "/"
        if view.path.is_file():
            records += prefixed(view.tensors, name, "")
            files += [FileInfo(base, f.nbytes) for f in view.files]
        else:
            records += prefixed(view.tensors, name, file_prefix)
            files += [FileInfo(file_prefix + f.path, f.nbytes) for f in view.files]
        values.update({f"{name}/{k}": v for k, v in view.values.items()})
    return CheckpointView(path, detection, tuple(files), tuple(records), values, views)
