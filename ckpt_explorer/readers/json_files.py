"""Small JSON companions: ``running_states.json``, ``trainer_state.json`` and config files."""

from __future__ import annotations

import json
from typing import Any

from ..errors import CorruptCheckpointError
from ..io.location import Location, PathLike, as_location
from ..types import Detection, FileInfo
from ..view import CheckpointView
from .roles import DETAIL_TRAINER_STATE, TRAINER_STATE_KEYS, content_traits, is_trainer_state

RUNNING_KEYS = {"epoch", "step", "sample_start_index", "global_step", "consumed_samples"}
MAX_JSON_BYTES = 16 * 2**20


def read_small_json(path: PathLike) -> Any:
    """Parse a small JSON file; a clear error if it is large or malformed."""
    path = as_location(path)
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise CorruptCheckpointError(
            path, f"a JSON file under {MAX_JSON_BYTES >> 20} MiB", f"{size} bytes"
        )
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise CorruptCheckpointError(path, "valid JSON", f"{e}") from e


def probe_running_states(path: Location) -> Detection | None:
    with path.open("rb") as f:
        head = f.read(64).lstrip()
    if not head.startswith(b"{") or path.stat().st_size > MAX_JSON_BYTES:
        return None
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    keys = set(doc) & RUNNING_KEYS
    if is_trainer_state(doc):
        return Detection(
            str(path),
            "running-states-json",
            "running_state",
            (
                f"JSON object with global_step {doc['global_step']!r} and "
                + ", ".join(sorted(TRAINER_STATE_KEYS & set(doc))),
            ),
            DETAIL_TRAINER_STATE,
            content_traits(DETAIL_TRAINER_STATE),
        )
    if len(keys) < 2 or "weight_map" in doc:
        return None
    return Detection(
        str(path),
        "running-states-json",
        "running_state",
        (f"JSON object with run position keys {', '.join(sorted(keys))}",),
    )


def open_running_states(path: Location, detection: Detection) -> CheckpointView:
    doc = read_small_json(path)
    return CheckpointView(path, detection, (FileInfo(path.name, path.stat().st_size),), (), doc)


def optional_json(folder: PathLike, name: str) -> Any:
    """The parsed ``folder/name`` if it exists, else None."""
    p = as_location(folder) / name
    return read_small_json(p) if p.is_file() else None
