"""The external data files of the ONNX models of a scanned folder.

A model saved with ``save_as_external_data`` keeps its tensors' bytes in files beside it
(``model.onnx.data``, one file per tensor, ...) that ``onnx.load`` and onnxruntime read as raw
tensor bytes at the offsets the model names: nothing else reads them. On its own such a file
is bytes the gate cannot place (``unverified``); named by a model of the folder, and with no
pickle any loader finds in it, it is data.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

from .judge import UNVERIFIED, FileVerdict, file_bytes
from .onnx_model import OnnxError, parse_model

FORMAT = "ONNX external data"
_UNPLACED = "bytes the gate cannot place"


def external_files(model: Path | Any) -> set[Path | Any]:
    """The files inside the model's folder its tensors' external data name."""
    try:
        size = model.stat().st_size
        with file_bytes(model, size) as mm:
            parsed = parse_model(mm, size)
    except (OSError, ValueError, OnnxError):
        return set()
    out = set()
    for loc in parsed.locations:
        norm = posixpath.normpath(loc.replace("\\", "/"))
        if loc.startswith(("/", "\\")) or norm.startswith("..") or ":" in loc[:3]:
            continue  # out of the folder: the model itself is unverified for it
        out.add(model.parent / norm)
    return out


def explain_external_data(by_path: dict[Any, FileVerdict]) -> None:
    """Call ``data`` each file that an ONNX model of the scan names as external data, where
    its only finding is that its bytes could not be placed."""
    for path, v in list(by_path.items()):
        if v.format != "ONNX model":
            continue
        for target in external_files(path):
            t = by_path.get(target)
            if t is None or t.verdict != "unverified" or t.pickles:
                continue
            errors = [f for f in t.findings if f.severity == "error"]
            if all(f.rule == UNVERIFIED and _UNPLACED in f.message for f in errors):
                t.findings = [f for f in t.findings if f not in errors]
                t.verdict = "data"
                t.format = f"{FORMAT} of {v.label}"


__all__ = ["FORMAT", "explain_external_data", "external_files"]
