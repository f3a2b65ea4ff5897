"""PEFT adapter folders: ``adapter_config.json`` plus ``adapter_model.safetensors|bin``."""

from __future__ import annotations

from ...errors import CorruptCheckpointError
from ...io.location import Location
from ...types import Detection, FileInfo
from ...view import CheckpointView
from ..json_files import read_small_json
from ..weights_file import open_file_records

ADAPTER_FILES = ("adapter_model.safetensors", "adapter_model.bin")


def probe(path: Location) -> Detection | None:
    """The adapter stored directly in ``path``, whatever lies beside it (a Trainer's optimizer,
    scheduler and RNG files beside it make the folder a training state: formats/ decides)."""
    if not (path / "adapter_config.json").is_file():
        return None
    found = [n for n in ADAPTER_FILES if (path / n).is_file()]
    config = read_small_json(path / "adapter_config.json")
    peft_type = config.get("peft_type", "?") if isinstance(config, dict) else "?"
    evidence = [f"adapter_config.json (peft_type {peft_type})"]
    evidence += [f"{n} beside it" for n in found]
    return Detection(
        str(path), "peft-adapter", "adapter", tuple(evidence), f"PEFT {peft_type} adapter"
    )


def open_adapter(path: Location, detection: Detection) -> CheckpointView:
    found = [n for n in ADAPTER_FILES if (path / n).is_file()]
    if not found:
        raise CorruptCheckpointError(
            path,
            "adapter_model.safetensors or adapter_model.bin",
            "adapter_config.json alone",
            "Copy the adapter weights next to its config.",
        )
    records, values = open_file_records(path / found[0], found[0])
    config = read_small_json(path / "adapter_config.json")
    if isinstance(config, dict):
        values.update(config)
    files = (
        FileInfo("adapter_config.json", (path / "adapter_config.json").stat().st_size),
        FileInfo(found[0], (path / found[0]).stat().st_size),
    )
    return CheckpointView(path, detection, files, tuple(records), values)
