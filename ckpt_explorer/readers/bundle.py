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

This module knows the family and nothing of the other families' probes: which children are
parts is decided in ``formats/training_state.py`` from the children's detections; here the
parts become a Detection (:func:`training_state_detection`) and their views one view
(:func:`bundle_view`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..io.location import Location
from ..types import Detection, FileInfo, TensorRecord
from ..view import CheckpointView, prefixed
from .deepspeed.folder import SAVE_DIR_FILES
from .hf import diffusers_config
from .hf.folder import WEIGHT_FILES
from .hf.peft_adapter import ADAPTER_FILES
from .hf.sharded_index import find_index, load_index

FAMILY = "training-state"
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
ADAPTER_OWN_FILES = frozenset({"adapter_config.json", *ADAPTER_FILES})
DEEPSPEED = "deepspeed"  # a tag folder is a part: the one ``latest`` names (older tags are not)

Part = tuple[Location, Detection]  # where a part lies, and what it was detected as


def children(path: Location) -> list[Location] | None:
    """The entries of ``path`` that may be parts (hidden ones never); None when there are too
    many for a training state."""
    found = [c for c in sorted(path.iterdir()) if not c.name.startswith(".")]
    return None if len(found) > MAX_CHILDREN else found


def own_model_files(path: Location) -> set[str]:
    """Files that belong to a model stored directly in ``path`` (index + shards)."""
    owned: set[str] = set()
    indexes = find_index(path)
    if indexes:
        owned.add(indexes[0].name)
        owned.update(load_index(indexes[0]).weight_map.values())
    owned.update(n for n in WEIGHT_FILES if (path / n).is_file())
    return owned


def ema_config(part: Part) -> dict[str, Any] | None:
    """The config of a model part saved by diffusers' EMAModel (None for any other part)."""
    child, detection = part
    if detection.kind != "model" or not child.is_dir():
        return None
    config = diffusers_config.model_config(child)
    return config if diffusers_config.is_ema(config) else None


def other_files(path: Location, parts: Mapping[str, Part]) -> list[str]:
    """Children of ``path`` that are no state part (role "other"; model side files excluded)."""
    taken = {p.name for p, _ in parts.values()}
    if "model" in parts or "adapter" in parts:
        taken |= own_model_files(path) | set(MODEL_SIDE_FILES)
        taken |= ADAPTER_OWN_FILES
    if any(d.family == DEEPSPEED for _, d in parts.values()):
        taken |= SAVE_DIR_FILES
    return [
        c.name for c in sorted(path.iterdir()) if not c.name.startswith(".") and c.name not in taken
    ]


def training_state_detection(path: Location, parts: Mapping[str, Part]) -> Detection | None:
    """The Detection of ``path`` from its parts, or None when they make no training state:
    two parts or more of two kinds or more (training args alone make no state), one of them
    weights, an optimizer or a DeepSpeed tag folder."""
    kinds = {d.kind for _, d in parts.values()} - {"args"}
    weights = kinds & {"model", "adapter", "optimizer"} or any(
        d.family == DEEPSPEED for _, d in parts.values()
    )
    if len(parts) < 2 or len(kinds) < 2 or not weights:
        return None
    evidence = [
        f"{name} → {d.kind}: " + (d.detail or d.family) + " (" + "; ".join(d.evidence[:2]) + ")"
        for name, (_, d) in parts.items()
    ]
    for name, part in parts.items():
        ema = ema_config(part)
        if ema is not None:
            evidence.append(f"{name} → {diffusers_config.ema_note(ema)}")
    if "model" in parts or "adapter" in parts:
        side = [n for n in MODEL_SIDE_FILES if (path / n).is_file()]
        evidence += [f"{n} → model (the model's config beside its weights)" for n in side]
    if any(d.family == DEEPSPEED for _, d in parts.values()):
        own = sorted(n for n in SAVE_DIR_FILES if (path / n).is_file())
        evidence.append(f"{', '.join(own)} → deepspeed (written by save_checkpoint beside its tag)")
    evidence += [f"{name} → other" for name in other_files(path, parts)[:8]]
    return Detection(
        str(path),
        FAMILY,
        "training_state",
        (f"{len(parts)} state parts side by side", *evidence),
        ", ".join(sorted({d.kind for _, d in parts.values()})),
    )


def bundle_view(
    path: Location, detection: Detection, views: Mapping[str, CheckpointView]
) -> CheckpointView:
    """One view of the parts' views: records ``<part>/<name>``, files relative to ``path``."""
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
    return CheckpointView(path, detection, tuple(files), tuple(records), values, dict(views))
