"""Security verdicts on checkpoints: every pickle judged, nothing unpickled.

``security_findings(path)`` gives validate's ``security.*`` findings for a file or folder;
``scan_paths(paths)`` gives one verdict per file for ``ckpt-explorer scan``.
"""

from __future__ import annotations

from .judge import CODE, REFUSED, FileVerdict, judge_file
from .scan import scan_paths, security_findings, unsafe_paths, view_security_findings

__all__ = [
    "CODE",
    "REFUSED",
    "FileVerdict",
    "judge_file",
    "scan_paths",
    "security_findings",
    "unsafe_paths",
    "view_security_findings",
]
