"""Validation rules: index and file integrity, model vs config, numeric health, optimizer,
scheduler and training-state bundle consistency, HF loadability.

One module per concern; :func:`validate_checkpoint` (``runner``) runs those that apply.
Importing this package is light: the rules and readers load on first call.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .findings import Finding, ValidationReport

if TYPE_CHECKING:
    from ..contracts import ProgressFn
    from ..io.location import Location
    from ..view import CheckpointView


# The runner's signature restated on purpose: the package stays light to import and the
# public function keeps its parameters visible to help() and type checkers.
def validate_checkpoint(
    path_or_view: str | Path | Location | CheckpointView,
    *,
    model: str | Path | Location | CheckpointView | None = None,
    numeric: bool = True,
    hf_load: bool = False,
    progress: ProgressFn | None = None,
) -> ValidationReport:
    """Validate a model, optimizer or training-state checkpoint.

    See :func:`ckpt_explorer.validate.runner.validate_checkpoint` for the arguments.
    """
    from .runner import validate_checkpoint as run

    return run(path_or_view, model=model, numeric=numeric, hf_load=hf_load, progress=progress)


__all__ = ["Finding", "ValidationReport", "validate_checkpoint"]
