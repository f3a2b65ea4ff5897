"""The diff engine: any checkpoint against any other, tensor by tensor, streamed.

Modules: ``align`` (pairing names), ``native`` (byte comparison, read-ahead), ``stats``
(chunked float64 figures), ``kernel`` (fused float64 chunk reductions with numba, shared with
the numeric scan and the dashboard's statistics), ``engine`` (streaming pairs in A's disk
order), ``values`` (hyperparameters and other non-tensor values), ``rows``/``report``
(DiffResult, DataFrame, JSON, aggregates), ``distributed`` (torchrun job), ``api``
(:func:`diff_checkpoints`).
"""

from .api import diff_checkpoints
from .report import DiffResult
from .rows import TensorDiff, ValueDiff

__all__ = ["DiffResult", "TensorDiff", "ValueDiff", "diff_checkpoints"]
