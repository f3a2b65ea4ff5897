"""Findings and the validation report: plain frozen dataclasses, a DataFrame, JSON, text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..finding import SEVERITIES, Finding

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ("rule", "severity", "message", "hint", "tensor", "file", "param_id")


@dataclass
class ValidationReport:
    """Everything :func:`validate_checkpoint` found: security first, then errors first.

    Attributes:
        path: what was validated.
        findings: every finding, ordered by severity then rule.
        checked: the rule modules that ran.
        stats: per-tensor numeric figures when the numeric scan ran (name -> dict).
    """

    path: str
    findings: list[Finding]
    checked: list[str] = field(default_factory=list)
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        order = {s: i for i, s in enumerate(SEVERITIES)}
        self.findings = sorted(  # security findings first: they decide whether to load at all
            self.findings,
            key=lambda f: (not f.rule.startswith("security."), order[f.severity], f.rule),
        )

    @property
    def ok(self) -> bool:
        """True when no error-level finding."""
        return not any(f.severity == "error" for f in self.findings)

    def by_severity(self, severity: str) -> list[Finding]:
        return [f for f in self.findings if f.severity == severity]

    def rules(self, severity: str | None = None) -> set[str]:
        return {f.rule for f in self.findings if severity is None or f.severity == severity}

    def summary(self) -> dict[str, int]:
        counts = dict.fromkeys(SEVERITIES, 0)
        for f in self.findings:
            counts[f.severity] += 1
        return counts

    def to_frame(self) -> pd.DataFrame:
        """One row per finding (columns rule, severity, message, hint, tensor, file, param_id)."""
        import pandas as pd

        return pd.DataFrame([f.to_dict() for f in self.findings], columns=list(COLUMNS))

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "ok": self.ok,
            "summary": self.summary(),
            "checked": list(self.checked),
            "findings": [f.to_dict() for f in self.findings],
        }

    def format_text(self, width: int = 100) -> str:
        return format_findings(self.path, self.findings, self.summary(), width)


def _where(f: Finding) -> str:
    if f.tensor:
        return f.tensor
    if f.param_id is not None:
        return f"param {f.param_id}"
    return f.file or ""


def format_findings(path: str, findings: list[Finding], summary: dict[str, int], width: int) -> str:
    """A plain-text table grouped by severity."""
    lines = [
        f"{path}: {summary['error']} error(s), {summary['warning']} warning(s), "
        f"{summary['info']} info"
    ]
    for severity in SEVERITIES:
        group = [f for f in findings if f.severity == severity]
        if not group:
            continue
        lines.append("")
        lines.append(f"{severity.upper()} ({len(group)})")
        rule_w = min(32, max(len(f.rule) for f in group))
        where_w = min(40, max(len(_where(f)) for f in group))
        for f in group:
            where = _where(f)
            if len(where) > where_w:
                where = "…" + where[-(where_w - 1) :]
            lines.append(f"  {f.rule:<{rule_w}}  {where:<{where_w}}  {f.message}")
            if f.hint:
                lines.append(f"  {'':<{rule_w}}  {'':<{where_w}}  → {f.hint}")
    if not findings:
        lines.append("no findings")
    return "\n".join(lines)
