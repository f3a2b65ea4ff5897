"""What diffusers writes beside its weights: a model's ``config.json`` and a pipeline's
``model_index.json``.

diffusers ``ModelMixin.save_pretrained`` writes ``diffusion_pytorch_model.safetensors`` (or
``.bin``, or ``-0000i-of-0000n`` shards with an index) beside a ``config.json`` holding
``_class_name`` and ``_diffusers_version``. ``EMAModel.save_pretrained`` saves the EMA weights
the same way, its own fields (``decay``, ``optimization_step``, ...) registered into that
config. A pipeline's ``save_pretrained`` writes ``model_index.json`` (component -> [library,
class]) and one subfolder per component; only the model components hold weights.
"""

from __future__ import annotations

from typing import Any

from ...errors import CkptExplorerError
from ...io.location import Location, PathLike
from ..json_files import optional_json

WEIGHT_FILES = ("diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.bin")
WEIGHT_STEM = "diffusion_pytorch_model"
# Written by EMAModel.state_dict() into the model config (all of them, always).
EMA_KEYS = frozenset(
    {"decay", "min_decay", "optimization_step", "update_after_step", "inv_gamma", "power"}
)


def model_config(folder: PathLike) -> dict[str, Any] | None:
    """The diffusers model config of ``folder`` (None when absent or not diffusers')."""
    try:
        doc = optional_json(folder, "config.json")
    except (CkptExplorerError, OSError):  # decides nothing here; the readers report it
        return None
    if isinstance(doc, dict) and "_diffusers_version" in doc and "_class_name" in doc:
        return doc
    return None


def is_ema(config: dict[str, Any] | None) -> bool:
    """True when the config carries every field EMAModel.save_pretrained registers."""
    return config is not None and set(config) >= EMA_KEYS


def evidence(config: dict[str, Any]) -> list[str]:
    """Evidence lines for a diffusers model folder of this config."""
    lines = [
        f"config.json: diffusers {config['_class_name']} "
        f"(_diffusers_version {config['_diffusers_version']}; ModelMixin.save_pretrained layout)"
    ]
    if is_ema(config):
        lines.append(ema_note(config))
    return lines


def ema_note(config: dict[str, Any]) -> str:
    return (
        f"an EMA copy of the weights (EMAModel.save_pretrained: decay {config.get('decay')}, "
        f"optimization_step {config.get('optimization_step')} in config.json), not the "
        "weights the optimizer trains"
    )


def _holds_weights(folder: Location) -> bool:
    """A weights file (or shard index) of diffusers or transformers directly in ``folder``."""
    stems = (WEIGHT_STEM, "model.", "model-", "pytorch_model")
    return any(p.is_file() and p.name.startswith(stems) for p in folder.iterdir())


def pipeline_summary(folder: Location) -> tuple[str, str] | None:
    """(one line naming a pipeline root's model subfolders, the first of them); None when
    ``folder`` is no diffusers pipeline root with a model subfolder."""
    try:
        index = optional_json(folder, "model_index.json")
    except (CkptExplorerError, OSError):
        return None
    if not isinstance(index, dict):
        return None
    models: list[str] = []
    others: list[str] = []
    for name, spec in index.items():
        if name.startswith("_") or not (folder / name).is_dir():
            continue
        cls = spec[1] if isinstance(spec, list) and len(spec) == 2 else "?"
        (models if _holds_weights(folder / name) else others).append(f"{name}/ ({cls})")
    if not models:
        return None
    line = f"a diffusers pipeline ({index.get('_class_name', 'model_index.json')}) whose models "
    line += "are in subfolders: " + ", ".join(models)
    line += f"; without weights: {', '.join(others)}" if others else ""
    return line, models[0].split("/", 1)[0]


__all__ = [
    "EMA_KEYS",
    "WEIGHT_FILES",
    "WEIGHT_STEM",
    "ema_note",
    "evidence",
    "is_ema",
    "meta_parameters",
    "model_config",
    "pipeline_summary",
]


def meta_parameters(config: dict[str, Any]) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """``named_parameters()`` of the diffusers model ``config`` describes, built on the meta
    device (no weights read); None when diffusers is absent or does not know the class."""
    import importlib.util

    if not isinstance(config.get("_class_name"), str) or not importlib.util.find_spec("diffusers"):
        return None
    import diffusers
    import torch
    from diffusers.utils import logging as dlogging

    cls = getattr(diffusers, config["_class_name"], None)
    if cls is None or not hasattr(cls, "from_config"):
        return None
    verbosity = dlogging.get_verbosity()
    dlogging.set_verbosity_error()  # an EMA config's own fields are "unexpected" to the model
    try:
        with torch.device("meta"):
            model = cls.from_config(config)
    finally:
        dlogging.set_verbosity(verbosity)
    return tuple((n, tuple(p.shape)) for n, p in model.named_parameters())
