"""ckpt_explorer: open, inspect, compare, validate and convert training checkpoints.

Importing this package is light: each public name is imported from its module when it is
first used (a listing never loads the diff, convert or validate engines), torch only where
tensor values are read or computed, panel/plotly only by the UI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import as_view, detect_format, open_checkpoint
    from .convert import plan_conversion, run_conversion
    from .diff import DiffResult, diff_checkpoints
    from .errors import (
        CkptExplorerError,
        CorruptCheckpointError,
        FormatDetectionError,
        MissingDependencyError,
        TruncatedFileError,
        UnsafeCheckpointError,
    )
    from .resume import resume_doctor
    from .types import Detection, FileInfo, OptimizerInfo, TensorRecord
    from .ui.explorer import Explorer
    from .validate import Finding, ValidationReport, validate_checkpoint
    from .view import CheckpointView

__version__ = "0.1.0"

# public name -> the module that defines it
_HOME = {
    "CheckpointView": ".view",
    "CkptExplorerError": ".errors",
    "CorruptCheckpointError": ".errors",
    "Detection": ".types",
    "DiffResult": ".diff",
    "Explorer": ".ui.explorer",
    "FileInfo": ".types",
    "Finding": ".validate",
    "FormatDetectionError": ".errors",
    "MissingDependencyError": ".errors",
    "OptimizerInfo": ".types",
    "TensorRecord": ".types",
    "TruncatedFileError": ".errors",
    "UnsafeCheckpointError": ".errors",
    "ValidationReport": ".validate",
    "as_view": ".api",
    "detect_format": ".api",
    "diff_checkpoints": ".diff",
    "open_checkpoint": ".api",
    "plan_conversion": ".convert",
    "resume_doctor": ".resume",
    "run_conversion": ".convert",
    "validate_checkpoint": ".validate",
}

__all__ = [
    "CheckpointView",
    "CkptExplorerError",
    "CorruptCheckpointError",
    "Detection",
    "DiffResult",
    "Explorer",
    "FileInfo",
    "Finding",
    "FormatDetectionError",
    "MissingDependencyError",
    "OptimizerInfo",
    "TensorRecord",
    "TruncatedFileError",
    "UnsafeCheckpointError",
    "ValidationReport",
    "__version__",
    "as_view",
    "detect_format",
    "diff_checkpoints",
    "open_checkpoint",
    "plan_conversion",
    "resume_doctor",
    "run_conversion",
    "validate_checkpoint",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
