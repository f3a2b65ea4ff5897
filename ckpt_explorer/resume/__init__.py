"""The resume doctor: ranked causes of a loss mismatch between two training states.

Importing this package is light; the doctor and its readers load on first call.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .report import Cause, DoctorReport

if TYPE_CHECKING:
    from ..contracts import ProgressFn
    from ..io.location import Location
    from ..view import CheckpointView


# The doctor's signature restated on purpose: the package stays light to import and the
# public function keeps its parameters visible to help() and type checkers.
def resume_doctor(
    a: str | Path | Location | CheckpointView,
    b: str | Path | Location | CheckpointView,
    *,
    compare_weights: bool = True,
    progress: ProgressFn | None = None,
) -> DoctorReport:
    """Rank likely causes of a loss mismatch between ``a`` (resumed from) and ``b``.

    See :func:`ckpt_explorer.resume.doctor.resume_doctor`.
    """
    from .doctor import resume_doctor as run

    return run(a, b, compare_weights=compare_weights, progress=progress)


__all__ = ["Cause", "DoctorReport", "resume_doctor"]
