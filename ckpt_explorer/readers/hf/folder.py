"""Folders holding one unsharded weights file (HF ``save_pretrained``, diffusers
``ModelMixin.save_pretrained`` or ColossalAI unsharded)."""

from __future__ import annotations

from ...io.location import Location
from ...types import Detection, FileInfo, Traits
from ...view import CheckpointView
from ..json_files import optional_json
from ..weights_file import open_file_records
from . import diffusers_config

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", *diffusers_config.WEIGHT_FILES)


def probe(path: Location) -> Detection | None:
    for name in WEIGHT_FILES:
        if (path / name).is_file():
            evidence = [f"{name} without an index → one unsharded weights file"]
            config = diffusers_config.model_config(path)
            if config is not None:
                evidence += diffusers_config.evidence(config)
            elif (path / "config.json").is_file():
                evidence.append("config.json beside it (HF save_pretrained layout)")
            ema = diffusers_config.is_ema(config)
            return Detection(
                str(path),
                "hf-single",
                "model",
                tuple(evidence),
                "EMA copy" if ema else "",
                Traits(ema_copy=ema),
            )
    return None


def open_folder(path: Location, detection: Detection) -> CheckpointView:
    name = next(n for n in WEIGHT_FILES if (path / n).is_file())
    records, values = open_file_records(path / name, name)
    files = [FileInfo(name, (path / name).stat().st_size)]
    for extra in ("config.json", "generation_config.json"):
        doc = optional_json(path, extra)
        if doc is not None:
            values[extra] = doc
            files.append(FileInfo(extra, (path / extra).stat().st_size))
    return CheckpointView(path, detection, tuple(files), tuple(records), values)
