"""Training-state folders: model, optimizer, scheduler and RNG/run state side by side.

Recognised by what the children *are* (each detected by content), not by their names:
ColossalChat's ``epoch-E_step-S/{modeling, optimizer, lr_scheduler, running_states.json}``,
``model/ optim/ lr_scheduler meta.pt``, an HF Trainer ``checkpoint-N`` folder whose own
weights (or PEFT adapter) sit beside ``optimizer.pt``, ``scheduler.pt``, ``rng_state.pth``,
``trainer_state.json`` and ``training_args.bin`` (with DeepSpeed, its ``global_stepN/`` tag
folder beside ``latest`` instead of ``optimizer.pt``), or accelerate's ``save_state`` folder
(diffusers' training scripts save ``unet/`` and ``unet_ema/`` there with ``save_pretrained``:
an EMAModel copy, told by its config, is listed after the trained model).
Each part's role is its Detection.kind (model, adapter, optimizer, scheduler, rng,
running_state, args; see readers/roles.py); other children are listed as "other" in the
evidence and are no part.
"""

from __future__ import annotations

from typing import Any

from ..errors import CkptExplorerError
from ..formats.registry import FormatSpec, spec_for, specs
from ..io.location import Location
from ..types import Detection, FileInfo, TensorRecord
from ..view import CheckpointView, prefixed
from . import deepspeed, diffusers_config, peft_adapter
from .hf_folder import WEIGHT_FILES
from .sharded_index import TMP_DIR, find_index, load_index

STATE_KINDS = {"model", "optimizer", "scheduler", "rng", "running_state", "adapter", "args"}
MAX_CHILDREN = 64
OWN_MODEL_FAMILIES = ("hf-sharded", "colossalai-sharded-model", "hf-single")
# Files that describe the model or the tokenizer: role "model" (beside the weights) or "other".
IGNORED = {
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "latest",
}
MODEL_SIDE_FILES = ("config.json", "generation_config.json")
DEEPSPEED = "deepspeed"  # a tag folder is a part: the one ``latest`` names (older tags are not)


def _own_model_files(path: Location) -> set[str]:
    """Files that belong to a model stored directly in ``path`` (index + shards)."""
    owned: set[str] = set()
    indexes = find_index(path)
    if indexes:
        owned.add(indexes[0].name)
        owned.update(load_index(indexes[0]).weight_map.values())
    owned.update(n for n in WEIGHT_FILES if (path / n).is_file())
    return owned


def _detect_child(
    child: Location, target: str, skip: tuple[str, ...] = ("training-state",)
) -> tuple[Detection, FormatSpec] | None:
    for spec in specs(target):
        if spec.name in skip:
            continue
        try:
            detection = spec.probe(child)
        except (CkptExplorerError, OSError):
            return None
        if detection is not None:
            return detection, spec
    return None


def find_parts(path: Location) -> dict[str, tuple[Location, Detection, FormatSpec]]:
    """Name -> (path, detection, spec) of the state parts in ``path``."""
    parts: dict[str, tuple[Location, Detection, FormatSpec]] = {}
    children = [c for c in sorted(path.iterdir()) if not c.name.startswith(".")]
    if len(children) > MAX_CHILDREN:
        return {}
    own = _detect_child(path, "dir", ("training-state", "peft-adapter", DEEPSPEED))
    owned: set[str] = set()
    if own is not None and own[0].family in OWN_MODEL_FAMILIES:
        parts["model"] = (path, *own)
        owned = _own_model_files(path)
    else:
        adapter = peft_adapter.adapter_detection(path)
        if adapter is not None:
            parts["adapter"] = (path, adapter, spec_for(adapter, "dir"))
            owned = {"adapter_config.json", *peft_adapter.ADAPTER_FILES}
    for child in children:
        if child.name in owned or child.name in IGNORED or child.name == TMP_DIR:
            continue
        found = _detect_child(child, "dir" if child.is_dir() else "file")
        if found is None:
            continue
        if found[0].family == DEEPSPEED:
            if child.name != deepspeed.latest_tag(path):
                continue
        elif found[0].kind not in STATE_KINDS:
            continue
        name = child.name if child.name not in parts else f"{child.name}#2"
        parts[name] = (child, *found)
    # EMA copies last: the trained model comes first where one model is picked (names, checks)
    return dict(sorted(parts.items(), key=lambda kv: _ema_config(kv[1]) is not None))


def _ema_config(part: tuple[Location, Detection, FormatSpec]) -> dict[str, Any] | None:
    """The config of a model part saved by diffusers' EMAModel (None for any other part)."""
    child, detection, _ = part
    if detection.kind != "model" or not child.is_dir():
        return None
    config = diffusers_config.model_config(child)
    return config if diffusers_config.is_ema(config) else None


def other_files(
    path: Location, parts: dict[str, tuple[Location, Detection, FormatSpec]]
) -> list[str]:
    """Children of ``path`` that are no state part (role "other"; model side files excluded)."""
    taken = {p.name for p, _, _ in parts.values()}
    if "model" in parts or "adapter" in parts:
        taken |= _own_model_files(path) | set(MODEL_SIDE_FILES)
        taken |= {"adapter_config.json", *peft_adapter.ADAPTER_FILES}
    if any(d.family == DEEPSPEED for _, d, _ in parts.values()):
        taken |= deepspeed.SAVE_DIR_FILES
    return [
        c.name for c in sorted(path.iterdir()) if not c.name.startswith(".") and c.name not in taken
    ]


def probe(path: Location) -> Detection | None:
    parts = find_parts(path)
    kinds = {d.kind for _, d, _ in parts.values()} - {"args"}  # args alone make no state
    weights = kinds & {"model", "adapter", "optimizer"} or any(
        d.family == DEEPSPEED for _, d, _ in parts.values()
    )
    if len(parts) < 2 or len(kinds) < 2 or not weights:
        return None
    evidence = [
        f"{name} → {d.kind}: " + (d.detail or d.family) + " (" + "; ".join(d.evidence[:2]) + ")"
        for name, (_, d, _) in parts.items()
    ]
    for name, part in parts.items():
        ema = _ema_config(part)
        if ema is not None:
            evidence.append(f"{name} → {diffusers_config.ema_note(ema)}")
    if "model" in parts or "adapter" in parts:
        side = [n for n in MODEL_SIDE_FILES if (path / n).is_file()]
        evidence += [f"{n} → model (the model's config beside its weights)" for n in side]
    if any(d.family == DEEPSPEED for _, d, _ in parts.values()):
        own = sorted(n for n in deepspeed.SAVE_DIR_FILES if (path / n).is_file())
        evidence.append(f"{', '.join(own)} → deepspeed (written by save_checkpoint beside its tag)")
    evidence += [f"{name} → other" for name in other_files(path, parts)[:8]]
    return Detection(
        str(path),
        "training-state",
        "training_state",
        (f"{len(parts)} state parts side by side", *evidence),
        ", ".join(sorted({d.kind for _, d, _ in parts.values()})),
    )


def open_bundle(path: Location, detection: Detection) -> CheckpointView:
    views: dict[str, CheckpointView] = {}
    for name, (child, part_detection, spec) in find_parts(path).items():
        views[name] = spec.open(child, part_detection)
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
