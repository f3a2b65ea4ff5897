"""LitGPT checkpoint folders: ``lit_model.pth`` beside ``model_config.yaml``.

LitGPT writes every checkpoint as a folder: its pretrain and finetune scripts save
``out_dir/step-<N>/`` (and ``final/``) with ``lit_model.pth`` (``fabric.save`` of the run
state: ``model``, ``optimizer``, ``iter_num``, ``step_count``, a finetune's ``scheduler``, a
pretrain's ``train_dataloader`` state), ``model_config.yaml`` (the ``litgpt.Config``) and
``hyperparameters.yaml`` (the command line's arguments); a downloaded or converted model folder
holds ``lit_model.pth`` (the weights alone) with ``model_config.yaml`` and tokenizer files.
The folder is told by content: a torch file ``lit_model.pth`` and a ``model_config.yaml``
mapping with LitGPT's ``Config`` fields. It opens as the torch file's view (named
``lit_model.pth/...``) with ``hyperparameters.yaml`` as a part of kind args.
"""

from __future__ import annotations

from typing import Any

from ..io.location import Location
from ..io.yaml_doc import yaml_mapping
from ..types import Detection, FileInfo
from ..view import CheckpointView
from . import bundle, torch_pickle
from .param_names import attach_names

FAMILY = "litgpt"
WEIGHTS = "lit_model.pth"
CONFIG = "model_config.yaml"
HPARAMS = "hyperparameters.yaml"
CONFIG_KEYS = ("n_layer", "n_embd", "block_size", "padded_vocab_size")


def flat(doc: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys (``train.global_batch_size``)."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def probe(path: Location) -> Detection | None:
    if not path.is_dir() or not (path / WEIGHTS).is_file():
        return None
    config = yaml_mapping(path / CONFIG)
    if config is None or not all(k in config for k in CONFIG_KEYS):
        return None
    inner = torch_pickle.probe(path / WEIGHTS)
    if inner is None:
        return None
    name = config.get("name")
    evidence = (
        f"{WEIGHTS} → {inner.kind}: {inner.detail or inner.family}",
        f"{CONFIG}: a litgpt Config ({', '.join(f'{k} {config[k]}' for k in CONFIG_KEYS[:2])}"
        + (f", {name}" if isinstance(name, str) else "")
        + ")",
        *([f"{HPARAMS}: the run's arguments"] if (path / HPARAMS).is_file() else []),
    )
    return Detection(str(path), FAMILY, inner.kind, evidence, f"LitGPT folder ({inner.kind})")


def _args_part(path: Location, doc: dict[str, Any]) -> CheckpointView:
    file = path / HPARAMS
    detection = Detection(str(file), FAMILY, "args", (f"{HPARAMS}: the run's arguments",))
    return CheckpointView(file, detection, (FileInfo(HPARAMS, file.stat().st_size),), (), flat(doc))


def open_folder(path: Location, detection: Detection) -> CheckpointView:
    """The folder as its ``lit_model.pth`` (named ``lit_model.pth/...``) and its arguments."""
    weights = path / WEIGHTS
    inner = torch_pickle.probe(weights)
    if inner is None:  # probed a moment ago: a file replaced under us
        from ..errors import FormatDetectionError

        raise FormatDetectionError(weights, "a torch.save file", "something else")
    # its optimizer ids named from its model part here: naming looks one level of parts deep
    views = {WEIGHTS: attach_names(torch_pickle.open_torch(weights, inner))}
    hparams = yaml_mapping(path / HPARAMS)
    if hparams is not None:
        views[HPARAMS] = _args_part(path, hparams)
    view = bundle.bundle_view(path, detection, views)
    config = yaml_mapping(path / CONFIG) or {}
    extra = (FileInfo(CONFIG, (path / CONFIG).stat().st_size),)
    values = {**view.values, **{f"{CONFIG}/{k}": v for k, v in flat(config).items()}}
    return CheckpointView(
        path, detection, view.files + extra, view.tensors, values, dict(view.parts)
    )
