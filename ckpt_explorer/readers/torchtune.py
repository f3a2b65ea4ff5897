"""torchtune output folders: ``epoch_N/`` weights beside ``recipe_state/recipe_state.pt``.

torchtune 0.6's checkpointers write ``<output_dir>/epoch_N/`` at the end of every epoch
(``FullModelHFCheckpointer``: ``model-0000K-of-0000N.safetensors`` + index under HF names,
``config.json`` copied; LoRA recipes add ``adapter_model.pt`` under torchtune's names,
``adapter_model.safetensors`` + ``adapter_config.json`` for PEFT, the shards then holding the
merged weights) and, at every intermediate epoch, ``recipe_state/recipe_state.pt`` (one file,
overwritten; see :mod:`.torchtune_recipe`); the recipe writes ``torchtune_config.yaml``.

Which epoch is the training state's model: the one the recipe state was saved with. torchtune
saves ``epoch_{e}`` and the recipe state with ``epochs_run = e + 1`` in the same
``save_checkpoint(epoch=e)``, so it is ``epoch_{epochs_run - 1}``; when that folder is missing
the largest ``epoch_N`` is taken (what torchtune's own resume loads) with a warning. Larger
epochs than the recipe state's (the final epoch is saved without a recipe state) are no part of
it and are named in a warning.

The view lists ``model/<name>`` (the epoch's weights, HF names; a LoRA epoch's merged ones, or
the adapter when only adapter weights were saved); parts: the epoch's model, the adapter(s),
``recipe_state/recipe_state.pt:optimizer`` with ids named by :mod:`.torchtune_names`,
``recipe_state/recipe_state.pt:run_state`` and ``torchtune_config.yaml`` (kind args).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ..errors import CkptExplorerError, CorruptCheckpointError
from ..io.location import Location
from ..types import Detection, FileInfo, TensorRecord
from ..view import CheckpointView, prefixed
from . import peft_adapter, torch_pickle
from .json_files import optional_json
from .one_file import RUN_PART
from .param_alignment import ParamOrder
from .torchtune_names import name_optimizer, torchtune_order
from .torchtune_recipe import (
    EPOCHS_KEY,
    FAMILY,
    OPT_KEY,
    RECIPE_DIR,
    RECIPE_FILE,
    RUN_KEYS,
    recipe_evidence,
    recipe_parts,
    recipe_root,
)

EPOCH_DIR = re.compile(r"^epoch_(\d+)$")
CONFIG_FILE = "torchtune_config.yaml"
ADAPTER_PT = "adapter_model.pt"
MAX_CONFIG_BYTES = 1 << 20


def recipe_path(path: Location) -> Location | None:
    """``recipe_state/recipe_state.pt`` (torchtune >= 0.5), else ``recipe_state.pt``."""
    for candidate in (path / RECIPE_DIR / RECIPE_FILE, path / RECIPE_FILE):
        if candidate.is_file():
            return candidate
    return None


def _epochs(path: Location) -> list[tuple[int, str]]:
    found = [(int(m.group(1)), c.name) for c in path.iterdir() if (m := EPOCH_DIR.match(c.name))]
    return sorted(e for e in found if (path / e[1]).is_dir())


def choose_epoch(path: Location, epochs_run: Any) -> tuple[str | None, str, list[str]]:
    """(the epoch folder of the training state, why, warnings)."""
    epochs = _epochs(path)
    if not epochs:
        return None, "no epoch_N folder", []
    largest = epochs[-1][1]
    names = [n for _, n in epochs]
    if isinstance(epochs_run, int) and f"epoch_{epochs_run - 1}" in names:
        chosen = f"epoch_{epochs_run - 1}"
        why = (
            f"epochs_run {epochs_run} → {chosen}, saved with the recipe state (torchtune "
            "writes epoch_{e} and recipe_state.pt with epochs_run e + 1 together)"
        )
        newer = [n for e, n in epochs if e > epochs_run - 1]
        warnings = (
            [
                f"{', '.join(newer)} newer than the recipe state (saved without one, e.g. the "
                f"final epoch): not part of this training state; torchtune's resume would load "
                f"{largest}'s weights with the optimizer of {chosen}"
            ]
            if newer
            else []
        )
        return chosen, why, warnings
    why = f"the largest epoch folder {largest} (what torchtune's resume loads)"
    return largest, why, [f"recipe state epochs_run {epochs_run!r} names no epoch folder"]


def read_config(path: Location) -> dict[str, Any] | None:
    """``torchtune_config.yaml`` parsed with ``yaml.safe_load`` (None when absent/unreadable)."""
    file = path / CONFIG_FILE
    if not file.is_file() or file.stat().st_size > MAX_CONFIG_BYTES:
        return None
    try:
        import yaml

        doc = yaml.safe_load(file.read_text(encoding="utf-8"))
    except Exception:
        return None
    return doc if isinstance(doc, dict) else None


def _config_facts(config: dict[str, Any]) -> tuple[str | None, str]:
    """(checkpointer model_type, a line of what the recipe config says)."""
    found_model, found_ckpt = config.get("model"), config.get("checkpointer")
    model: dict[str, Any] = found_model if isinstance(found_model, dict) else {}
    ckpt: dict[str, Any] = found_ckpt if isinstance(found_ckpt, dict) else {}
    model_type = ckpt.get("model_type") if isinstance(ckpt.get("model_type"), str) else None
    facts = [
        f"model {model.get('_component_', '?')}",
        f"checkpointer {str(ckpt.get('_component_', '?')).rsplit('.', 1)[-1]}",
    ]
    if model_type:
        facts.append(f"model_type {model_type}")
    return model_type, ", ".join(facts)


def probe(path: Location) -> Detection | None:
    recipe = recipe_path(path)
    if recipe is None:
        return None
    root = recipe_root(recipe)  # a corrupt or unsafe recipe state is said, not skipped
    if root is None:
        return None
    chosen, why, _ = choose_epoch(path, root.get(EPOCHS_KEY))
    if chosen is None:
        return None
    rel = recipe.relative_to(path).as_posix()
    epochs = ", ".join(n for _, n in _epochs(path))
    evidence = [
        *recipe_evidence(root, rel),
        f"{epochs}: torchtune checkpointer epoch folder(s); {why}",
    ]
    config = read_config(path)
    if config is not None:
        evidence.append(f"{CONFIG_FILE}: the recipe config ({_config_facts(config)[1]})")
    lora = (path / chosen / ADAPTER_PT).is_file() or (
        path / chosen / "adapter_config.json"
    ).is_file()
    detail = f"torchtune output, {chosen} + recipe state" + (" (LoRA)" if lora else "")
    return Detection(str(path), FAMILY, "training_state", tuple(evidence), detail)


def _model_view(epoch: Location) -> CheckpointView | None:
    """The weights of an epoch folder (HF sharded or one file), adapters aside."""
    from ..formats.registry import specs

    for spec in specs("dir"):
        if spec.name not in ("sharded-index", "hf-single"):
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
    peft = peft_adapter.adapter_detection(epoch)
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


def _tied(epoch: Location) -> bool:
    try:
        config = optional_json(epoch, "config.json")
    except CkptExplorerError:
        return False
    return isinstance(config, dict) and bool(config.get("tie_word_embeddings"))


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
        _tied(epoch),
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
    model_type = _config_facts(config)[0] if config is not None else None
    return _order(epoch, _model_view(epoch), _adapter_views(epoch), model_type)


def _files(path: Location, folder: Location) -> list[FileInfo]:
    return [
        FileInfo(f.relative_to(path).as_posix(), f.stat().st_size)
        for f in sorted(folder.iterdir())
        if f.is_file() and not f.name.startswith(".")
    ]


def open_output(path: Location, detection: Detection) -> CheckpointView:
    recipe = recipe_path(path)
    if recipe is None:
        raise CorruptCheckpointError(path, f"{RECIPE_DIR}/{RECIPE_FILE}", "none")
    rel = recipe.relative_to(path).as_posix()
    recipe_views, _, recipe_values = recipe_parts(recipe)
    chosen, _, warnings = choose_epoch(path, recipe_values.get(EPOCHS_KEY))
    if chosen is None:
        raise CorruptCheckpointError(path, "an epoch_N folder beside the recipe state", "none")
    epoch = path / chosen
    files = [FileInfo(rel, recipe.stat().st_size), *_files(path, epoch)]
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
        model_type = _config_facts(config)[0]
    if OPT_KEY in recipe_views:
        order, reason = _order(epoch, model, adapters, model_type)
        if order is None:
            warnings.append(f"optimizer ids not named: {reason}")
        parts[f"{rel}:optimizer"] = name_optimizer(recipe_views[OPT_KEY], order, reason)
    if RUN_PART in recipe_views:
        parts[f"{rel}:run_state"] = recipe_views[RUN_PART]
    if config is not None:
        size = (path / CONFIG_FILE).stat().st_size
        files.append(FileInfo(CONFIG_FILE, size))
        parts[CONFIG_FILE] = CheckpointView(
            path / CONFIG_FILE,
            Detection(
                str(path / CONFIG_FILE),
                FAMILY,
                "args",
                (f"{CONFIG_FILE}: {_config_facts(config)[1]}",),
                "torchtune recipe config",
            ),
            (FileInfo(CONFIG_FILE, size),),
            (),
            config,
        )
    shown = model if model is not None else (adapter[1] if adapter is not None else None)
    records: list[TensorRecord] = []
    if shown is not None:  # the model (a LoRA epoch's merged weights), else the adapter
        label = "model" if shown is model else "adapter"
        records = prefixed(shown.tensors, label, f"{chosen}/")
    values: dict[str, Any] = {k: recipe_values[k] for k in RUN_KEYS if k in recipe_values}
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
