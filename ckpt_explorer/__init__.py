"""ckpt_explorer: open, inspect, compare, validate and convert training checkpoints.

Importing this package is light: torch is imported by the readers, panel/plotly only by the UI.
"""

from .api import detect_format, open_checkpoint
from .diff import DiffResult, diff_checkpoints
from .errors import (
    CkptExplorerError,
    CorruptCheckpointError,
    FormatDetectionError,
    MissingDependencyError,
    TruncatedFileError,
    UnsafeCheckpointError,
)
from .types import Detection, FileInfo, OptimizerInfo, TensorRecord
from .view import CheckpointView

__version__ = "0.1.0"

__all__ = [
    "CheckpointView",
    "CkptExplorerError",
    "CorruptCheckpointError",
    "Detection",
    "DiffResult",
    "FileInfo",
    "FormatDetectionError",
    "MissingDependencyError",
    "OptimizerInfo",
    "TensorRecord",
    "TruncatedFileError",
    "UnsafeCheckpointError",
    "__version__",
    "detect_format",
    "diff_checkpoints",
    "open_checkpoint",
]
