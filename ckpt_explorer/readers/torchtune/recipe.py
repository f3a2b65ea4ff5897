"""torchtune's ``recipe_state.pt``: the optimizer and the run position of a fine-tune.

torchtune 0.6's recipes (``full_finetune_*``, ``lora_finetune_*``, ...) save, beside each
intermediate ``epoch_N/`` of weights, ``<output_dir>/recipe_state/recipe_state.pt`` =
``torch.save({'seed', 'epochs_run', 'total_epochs', 'max_steps_per_epoch', 'dataloader',
'optimizer'})`` (keys from ``torchtune.training.checkpointing._utils``; PPO adds ``steps_run``
and ``rng_state``). There is no LR scheduler state: the recipe rebuilds the scheduler at resume
with ``last_epoch = epochs_run * steps_per_epoch - 1``; no RNG state either, the seed only.

The file is one training state split by content: ``optimizer`` (kind optimizer, the torch
``state_dict`` named ``state.<id>.<name>``) and :data:`~..training_state_file.RUN_PART` (kind
running_state: ``epochs_run``, ``total_epochs``, ``max_steps_per_epoch``, ``seed``,
``dataloader`` ...), as other one-file training states are. Opened alone, its optimizer ids are
named from the output folder around it (``formats/torchtune_output.py``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...io.location import Location
from ...types import Detection, FileInfo, TensorRecord, Traits
from ...view import CheckpointView
from .. import torch_pickle
from ..optimizer_info import optimizer_info_from_tree
from ..roles import DETAIL_SCHEDULER_FROM_POSITION
from ..training_state_file import RUN_PART

FAMILY = "torchtune"
RECIPE_DIR = "recipe_state"
RECIPE_FILE = "recipe_state.pt"
EPOCHS_KEY = "epochs_run"
# What a recipe saves of its run (besides the optimizer)
RECIPE_KEYS = ("epochs_run", "total_epochs", "max_steps_per_epoch", "steps_run", "seed")
OPT_KEY = "optimizer"
DETAIL = "torchtune recipe state (optimizer, run position, seed)"


def recipe_root(path: Location) -> dict[Any, Any] | None:
    """The root of ``path`` when it is a torchtune recipe state (None otherwise)."""
    root = torch_pickle.torch_root(path)
    if not isinstance(root, dict) or not isinstance(root.get(EPOCHS_KEY), int):
        return None
    keys = set(map(str, root))
    optimizer = root.get(OPT_KEY)
    has_optimizer = isinstance(optimizer, dict) and {"state", "param_groups"} <= set(
        map(str, optimizer)
    )
    if len(keys & set(RECIPE_KEYS)) < 3 and not has_optimizer:
        return None
    return root


def recipe_evidence(root: dict[Any, Any], name: str) -> list[str]:
    keys = set(map(str, root))
    run = ", ".join(f"{k} {root[k]!r}" for k in RECIPE_KEYS if k in root)
    evidence = [f"{name}: torchtune recipe state ({run})"]
    if OPT_KEY in keys:
        evidence.append(f"{name}: 'optimizer' is a torch optimizer state_dict")
    if "lr_scheduler" not in keys:
        evidence.append(
            f"{name}: no LR scheduler state (torchtune rebuilds it from epochs_run at resume)"
        )
    return evidence


def probe_file(path: Location) -> Detection | None:
    root = recipe_root(path)
    if root is None:
        return None
    return Detection(
        str(path),
        FAMILY,
        "training_state",
        tuple(recipe_evidence(root, path.name)),
        DETAIL,
        Traits(loaded_by="torch.load"),  # a torch.save file (the folder around it is not one)
    )


def _under(records: list[TensorRecord], key: str) -> list[TensorRecord]:
    return [
        replace(r, name=r.name[len(key) + 1 :]) for r in records if r.name.startswith(key + ".")
    ]


def recipe_parts(
    path: Location,
) -> tuple[dict[str, CheckpointView], list[TensorRecord], dict[str, Any]]:
    """(parts ``optimizer`` and :data:`RUN_PART`, the file's records, its values)."""
    structure = torch_pickle.torch_structure(path)
    root = structure.root
    records, values = torch_pickle.records_and_values(path, path.name, root, structure)
    parts: dict[str, CheckpointView] = {}
    optimizer = root.get(OPT_KEY) if isinstance(root, dict) else None
    if isinstance(optimizer, dict) and {"state", "param_groups"} <= set(map(str, optimizer)):
        o_records = _under(records, OPT_KEY)
        prefix = OPT_KEY + "."
        o_values = {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)}
        parts[OPT_KEY] = CheckpointView(
            path,
            Detection(
                str(path),
                FAMILY,
                "optimizer",
                (f"'optimizer' in {path.name}: a torch optimizer state_dict",),
                "optimizer state_dict",
            ),
            (FileInfo(path.name, sum(r.nbytes for r in o_records)),),
            tuple(o_records),
            o_values,
            optimizer=optimizer_info_from_tree(o_records, o_values),
        )
    loose = {k: v for k, v in values.items() if not k.startswith(OPT_KEY + ".")}
    loose_records = [r for r in records if not r.name.startswith(OPT_KEY + ".")]
    if loose or loose_records:
        found = [k for k in RECIPE_KEYS if k in loose]
        kind = "rng" if "rng_state" in {k.split(".")[0] for k in loose} else "running_state"
        parts[RUN_PART] = CheckpointView(
            path,
            Detection(
                str(path),
                FAMILY,
                kind,
                (f"run position keys {', '.join(found)} in {path.name}",),
                DETAIL_SCHEDULER_FROM_POSITION
                if kind == "running_state"
                else "torchtune run position, seed and RNG state",
                Traits(scheduler_from_position=kind == "running_state"),
            ),
            (FileInfo(path.name, sum(r.nbytes for r in loose_records)),),
            tuple(loose_records),
            loose,
        )
    return parts, records, values
