"""torchtune output folders: ``epoch_N/`` weights beside ``recipe_state/recipe_state.pt``.

torchtune 0.6's checkpointers write ``<output_dir>/epoch_N/`` at the end of every epoch
(``FullModelHFCheckpointer``: ``model-0000K-of-0000N.safetensors`` + index under HF names,
``config.json`` copied; LoRA recipes add ``adapter_model.pt`` under torchtune's names,
``adapter_model.safetensors`` + ``adapter_config.json`` for PEFT, the shards then holding the
merged weights) and, at every intermediate epoch, ``recipe_state/recipe_state.pt`` (one file,
overwritten; see :mod:`.recipe`); the recipe writes ``torchtune_config.yaml``.

Which epoch is the training state's model: the one the recipe state was saved with. torchtune
saves ``epoch_{e}`` and the recipe state with ``epochs_run = e + 1`` in the same
``save_checkpoint(epoch=e)``, so it is ``epoch_{epochs_run - 1}``; when that folder is missing
the largest ``epoch_N`` is taken (what torchtune's own resume loads) with a warning. Larger
epochs than the recipe state's (the final epoch is saved without a recipe state) are no part of
it and are named in a warning.

The view lists ``model/<name>`` (the epoch's weights, HF names; a LoRA epoch's merged ones, or
the adapter when only adapter weights were saved); parts: the epoch's model, the adapter(s),
``recipe_state/recipe_state.pt:optimizer`` with ids named by :mod:`.names`,
``recipe_state/recipe_state.pt:run_state`` and ``torchtune_config.yaml`` (kind args).

Here: recognising an output folder and choosing its epoch; the view is composed from the
epoch's model, adapter and recipe-state views in ``formats/torchtune_output.py``.
"""

from __future__ import annotations

import re
from typing import Any

from ...errors import CkptExplorerError
from ...io.location import Location
from ...io.yaml_doc import yaml_mapping
from ...types import Detection, FileInfo
from ..json_files import optional_json
from .recipe import EPOCHS_KEY, FAMILY, RECIPE_DIR, RECIPE_FILE, recipe_evidence, recipe_root

EPOCH_DIR = re.compile(r"^epoch_(\d+)$")
CONFIG_FILE = "torchtune_config.yaml"
ADAPTER_PT = "adapter_model.pt"


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
    return yaml_mapping(path / CONFIG_FILE)


def config_facts(config: dict[str, Any]) -> tuple[str | None, str]:
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
        evidence.append(f"{CONFIG_FILE}: the recipe config ({config_facts(config)[1]})")
    lora = (path / chosen / ADAPTER_PT).is_file() or (
        path / chosen / "adapter_config.json"
    ).is_file()
    detail = f"torchtune output, {chosen} + recipe state" + (" (LoRA)" if lora else "")
    return Detection(str(path), FAMILY, "training_state", tuple(evidence), detail)


def ties_embeddings(epoch: Location) -> bool:
    """Whether the epoch's ``config.json`` ties the embedding and the output head."""
    try:
        config = optional_json(epoch, "config.json")
    except CkptExplorerError:
        return False
    return isinstance(config, dict) and bool(config.get("tie_word_embeddings"))


def folder_files(path: Location, folder: Location) -> list[FileInfo]:
    """The files directly in ``folder`` (hidden ones aside), named relative to ``path``."""
    return [
        FileInfo(f.relative_to(path).as_posix(), f.stat().st_size)
        for f in sorted(folder.iterdir())
        if f.is_file() and not f.name.startswith(".")
    ]
