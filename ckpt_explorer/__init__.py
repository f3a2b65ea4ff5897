"""ckpt_explorer: open, inspect, compare, validate and convert training checkpoints.

Importing this package is light: torch is imported only where tensor values are read or
computed (listing needs none), panel/plotly only by the UI.
"""

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
