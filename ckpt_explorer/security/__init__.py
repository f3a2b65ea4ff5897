"""The security gate: every file judged by content, every pickle walked as its loader reads it.

``scan_paths(paths)`` gives one verdict per file for ``ckpt-explorer scan`` (``safe``,
``unsafe``, ``unverified``, ``data``); ``security_findings(path)`` gives validate's
``security.*`` findings. Nothing is unpickled, imported or called.
"""

from __future__ import annotations

from .judge import CODE, REFUSED, UNVERIFIED, VERDICTS, FileVerdict, judge_file
from .scan import ScanReport, scan_paths, security_findings, unsafe_paths, view_security_findings

__all__ = [
    "CODE",
    "REFUSED",
    "UNVERIFIED",
    "VERDICTS",
    "FileVerdict",
    "ScanReport",
    "judge_file",
    "scan_paths",
    "security_findings",
    "unsafe_paths",
    "view_security_findings",
]
