"""torchtune output folders and recipe states, composed from the epoch's model and adapter
views and the recipe state's parts (see ``readers/torchtune/folder.py``, ``readers/torchtune/recipe.py``).

The epoch's weights are opened by the HF entries of the registry (sharded index, one file); the
recipe state's optimizer ids are named in torchtune's parameter order, which the epoch's model
and adapters give (``readers/torchtune/names.py``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import CorruptCheckpointError
from ..io.location import Location
from ..readers import torch_pickle
from ..readers.hf import peft_adapter
from ..readers.param_alignment import ParamOrder
from ..readers.torchtune.folder import (
    ADAPTER_PT,
    CONFIG_FILE,
    choose_epoch,
    config_facts,
    folder_files,
    read_config,
    recipe_path,
    ties_embeddings,
)
from ..readers.torchtune.names import name_optimizer, torchtune_order
from ..readers.torchtune.recipe import (
    EPOCHS_KEY,
    FAMILY,
    OPT_KEY,
    RECIPE_DIR,
    RECIPE_FILE,
    RECIPE_KEYS,
    recipe_parts,
)
from ..readers.training_state_file import RUN_PART
from ..types import Detection, FileInfo, TensorRecord
from ..view import CheckpointView, prefixed
from .registry import specs

EPOCH_MODEL_ENTRIES = ("sharded-index", "hf-single")


def _model_view(epoch: Location) -> CheckpointView | None:
    """The weights of an epoch folder (HF sharded or one file), adapters aside."""
    for spec in specs("dir"):
        if spec.name not in EPOCH_MODEL_ENTRIES:
            continue
        detection = spec.probe(epoch)
        if detection is not None and detection.kind == "model":
            return spec.open(epoch, detection)
    return None


def _adapter_views(epoch: Location) -> dict[str, CheckpointView]:
    """The LoRA adapter files of an epoch: ``adapter_model.pt`` (torchtune's names) and the
    PEFT ``adapter_model.safetensors`` (+ config), by file name."""
    out: dict[str, CheckpointView] = {}
    pt = epoch / ADAPTER_PT
    if pt.is_file():
        found = torch_pickle.probe(pt)
        if found is not None and found.kind == "model":
            out[ADAPTER_PT] = torch_pickle.open_torch(pt, found)
    peft = peft_adapter.probe(epoch)
    if peft is not None and any((epoch / n).is_file() for n in peft_adapter.ADAPTER_FILES):
        name = next(n for n in peft_adapter.ADAPTER_FILES if (epoch / n).is_file())
        out[name] = peft_adapter.open_adapter(epoch, peft)
    return out


def _adapter_part(adapters: dict[str, CheckpointView]) -> tuple[str, CheckpointView] | None:
    """One adapter part: ``adapter_model.pt`` (what torchtune resumes from, named as the
    optimizer's ids are), with the PEFT config's values; else the PEFT adapter."""
    pt = adapters.get(ADAPTER_PT)
    peft = next(((n, v) for n, v in adapters.items() if n != ADAPTER_PT), None)
    if pt is None:
        return peft
    evidence = [f"{ADAPTER_PT}: {len(pt.tensors)} LoRA tensors under torchtune's names"]
    values = dict(pt.values)
    if peft is not None:
        evidence.append(f"{peft[0]} + adapter_config.json beside it: the same adapter, PEFT names")
        values.update({k: v for k, v in peft[1].values.items() if not k.startswith("__")})
    detection = Detection(
        str(pt.path), pt.family, "adapter", tuple(evidence), "torchtune LoRA adapter"
    )
    return ADAPTER_PT, CheckpointView(pt.path, detection, pt.files, pt.tensors, values)


def _order(
    epoch: Location,
    model: CheckpointView | None,
    adapters: dict[str, CheckpointView],
    model_type: str | None,
) -> tuple[ParamOrder | None, str]:
    adapter = adapters.get(ADAPTER_PT)
    peft = next((v for n, v in adapters.items() if n != ADAPTER_PT), None)
    return torchtune_order(
        model.tensors if model is not None else (),
        adapter.tensors if adapter is not None else (),
        peft.tensors if peft is not None else (),
        model_type,
        ties_embeddings(epoch),
        f"{epoch.name}/",
    )


def epoch_model_order(
    output_dir: Location, recipe_values: dict[str, Any]
) -> tuple[ParamOrder | None, str]:
    """torchtune's parameter order for the epoch the recipe state belongs to, or None and why."""
    chosen, _, _ = choose_epoch(output_dir, recipe_values.get(EPOCHS_KEY))
    if chosen is None:
        return None, "no epoch_N folder beside the recipe state"
    epoch = output_dir / chosen
    config = read_config(output_dir)
    model_type = config_facts(config)[0] if config is not None else None
    return _order(epoch, _model_view(epoch), _adapter_views(epoch), model_type)


def _config_part(path: Location, config: dict[str, Any]) -> CheckpointView:
    """``torchtune_config.yaml`` as a part of kind args."""
    size = (path / CONFIG_FILE).stat().st_size
    detection = Detection(
        str(path / CONFIG_FILE),
        FAMILY,
        "args",
        (f"{CONFIG_FILE}: {config_facts(config)[1]}",),
        "torchtune recipe config",
    )
    return CheckpointView(path / CONFIG_FILE, detection, (FileInfo(CONFIG_FILE, size),), (), config)


def open_output(path: Location, detection: Detection) -> CheckpointView:
    """An output folder: the chosen epoch's model and adapter, the recipe state's optimizer
    (ids under torchtune's names) and run state, the recipe config."""
    recipe = recipe_path(path)
    if recipe is None:
        raise CorruptCheckpointError(path, f"{RECIPE_DIR}/{RECIPE_FILE}", "none")
    rel = recipe.relative_to(path).as_posix()
    recipe_views, _, recipe_values = recipe_parts(recipe)
    chosen, _, warnings = choose_epoch(path, recipe_values.get(EPOCHS_KEY))
    if chosen is None:
        raise CorruptCheckpointError(path, "an epoch_N folder beside the recipe state", "none")
    epoch = path / chosen
    files = [FileInfo(rel, recipe.stat().st_size), *folder_files(path, epoch)]
    config = read_config(path)
    model_type = None
    parts: dict[str, CheckpointView] = {}
    model = _model_view(epoch)
    adapters = _adapter_views(epoch)
    if model is not None:
        parts[chosen] = model
    adapter = _adapter_part(adapters)
    if adapter is not None:
        parts[f"{chosen}/{adapter[0]}"] = adapter[1]
    order, reason = None, ""
    if config is not None:
        model_type = config_facts(config)[0]
    if OPT_KEY in recipe_views:
        order, reason = _order(epoch, model, adapters, model_type)
        if order is None:
            warnings.append(f"optimizer ids not named: {reason}")
        parts[f"{rel}:optimizer"] = name_optimizer(recipe_views[OPT_KEY], order, reason)
    if RUN_PART in recipe_views:
        parts[f"{rel}:run_state"] = recipe_views[RUN_PART]
    if config is not None:
        files.append(FileInfo(CONFIG_FILE, (path / CONFIG_FILE).stat().st_size))
        parts[CONFIG_FILE] = _config_part(path, config)
    shown = model if model is not None else (adapter[1] if adapter is not None else None)
    records: list[TensorRecord] = []
    if shown is not None:  # the model (a LoRA epoch's merged weights), else the adapter
        label = "model" if shown is model else "adapter"
        records = prefixed(shown.tensors, label, f"{chosen}/")
    values: dict[str, Any] = {k: recipe_values[k] for k in RECIPE_KEYS if k in recipe_values}
    values["epoch_dir"] = chosen
    if model_type is not None:
        values["model_type"] = model_type
    if order is not None:
        detection = replace(
            detection,
            evidence=(
                *detection.evidence,
                f"optimizer ids under torchtune's names ({chosen} holds HF names; q/k rows "
                "permuted back, so q_proj/k_proj moments are in torchtune's row order)",
            ),
        )
    return CheckpointView(
        path, detection, tuple(files), tuple(records), values, parts, warnings=tuple(warnings)
    )


def open_recipe_state(path: Location, detection: Detection) -> CheckpointView:
    """A ``recipe_state.pt`` opened alone: its parts, its ids named from the output folder
    around it when there is one (``<output_dir>/recipe_state/recipe_state.pt``)."""
    parts, records, values = recipe_parts(path)
    if OPT_KEY in parts:  # torchtune's names, or none: never an HF model's order
        output_dir = path.parent.parent if path.parent.name == RECIPE_DIR else None
        order, reason = None, f"no {RECIPE_DIR}/ folder of a torchtune output around it"
        if output_dir is not None:
            order, reason = epoch_model_order(output_dir, values)
        parts[OPT_KEY] = name_optimizer(parts[OPT_KEY], order, reason)
    files = (FileInfo(path.name, path.stat().st_size),)
    return CheckpointView(path, detection, files, tuple(records), values, parts)
