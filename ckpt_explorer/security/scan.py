"""Judge files and folders: validate's security findings and ``scan``'s per-file verdicts."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..validate.findings import Finding
from ..view import CheckpointView
from .judge import FileVerdict, judge_file
from .sources import iter_files


def _label(path: Path, root: Path) -> str:
    if root.is_dir():
        return str(path.relative_to(root))
    return path.name


def security_findings(root: str | Path) -> list[Finding]:
    """Every ``security.*`` finding for a checkpoint file, or every file under a folder."""
    root = Path(root)
    out: list[Finding] = []
    for path in iter_files([root]):
        verdict = judge_file(path, _label(path, root))
        out += verdict.findings
        if verdict.unreadable and verdict.kind is not None:
            out.append(
                Finding(
                    "security.container",
                    "error",
                    f"{verdict.label}: its pickles cannot be read ({verdict.unreadable})",
                    "The file is damaged; nothing in it was judged safe.",
                    file=verdict.label,
                )
            )
    return out


def view_security_findings(view: CheckpointView) -> list[Finding]:
    """:func:`security_findings` of an opened checkpoint, weighed by each file's role (a
    refusal by torch's defaults is an error for weights, info for other training-state
    parts): what validate reports and the dashboard's banner shows."""
    from ..validate.security_severity import weigh_refusals

    return weigh_refusals(security_findings(view.path), view)


def unsafe_paths(root: str | Path) -> set[Path]:
    """Files under ``root`` whose pickles could run code, and the folders holding them."""
    root = Path(root)
    out: set[Path] = set()
    for verdict in scan_paths([root]).verdicts:
        if verdict.unsafe:
            out.add(verdict.path)
            out.update(p for p in verdict.path.parents if p == root or root in p.parents)
    return out


@dataclass
class ScanReport:
    """Verdicts of ``scan``: one per checkpoint file (torch, pickle, safetensors), plus timing."""

    verdicts: list[FileVerdict] = field(default_factory=list)
    files_seen: int = 0
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        """1 when any file is unsafe, else 2 when any is unreadable, else 0."""
        if any(v.unsafe for v in self.verdicts):
            return 1
        return 2 if any(v.unreadable for v in self.verdicts) else 0

    @property
    def nbytes(self) -> int:
        return sum(v.nbytes for v in self.verdicts)

    def to_json(self) -> dict[str, Any]:
        return {
            "files_seen": self.files_seen,
            "files_judged": len(self.verdicts),
            "unsafe": sum(v.unsafe for v in self.verdicts),
            "seconds": round(self.seconds, 3),
            "files": [
                {
                    "path": str(v.path),
                    "verdict": v.verdict,
                    "pickles": v.pickles,
                    "unreadable": v.unreadable or None,
                    "findings": [f.to_dict() for f in v.findings],
                }
                for v in self.verdicts
            ],
        }


def scan_paths(paths: list[str | Path]) -> ScanReport:
    """Judge every file under ``paths`` (folders recursively); header-only."""
    report = ScanReport()
    start = time.perf_counter()
    for path in iter_files([Path(p) for p in paths]):
        report.files_seen += 1
        if not path.is_file():
            why = "not a regular file" if path.exists() else "no such file"
            verdict = FileVerdict(path, str(path), None, unreadable=why)
            report.verdicts.append(verdict)
            continue
        verdict = judge_file(path)
        if verdict.kind is not None or verdict.unreadable:
            report.verdicts.append(verdict)
    report.seconds = time.perf_counter() - start
    return report
