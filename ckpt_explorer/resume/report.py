"""The doctor's report: ranked causes with their evidence (plain dataclasses, JSON, text)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..readable import readable_pair

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Cause:
    """One likely cause of a loss mismatch after resume."""

    cause: str
    title: str
    score: float
    evidence: tuple[str, ...]
    hint: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["evidence"] = list(self.evidence)
        return d


@dataclass
class DoctorReport:
    a: str
    b: str
    causes: list[Cause] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.causes = sorted(self.causes, key=lambda c: -c.score)

    @property
    def top(self) -> Cause | None:
        return self.causes[0] if self.causes else None

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "facts": self.facts,
            "causes": [c.to_dict() for c in self.causes],
        }

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        rows = [{**c.to_dict(), "evidence": "; ".join(c.evidence)} for c in self.causes]
        return pd.DataFrame(rows, columns=["cause", "title", "score", "evidence", "hint"])

    def format_text(self) -> str:
        lines = [f"resume doctor: A = {self.a}", f"               B = {self.b}", ""]
        for k, v in self.facts.items():
            ra, rb = readable_pair(v[0], v[1])
            lines.append(f"  {k}: A {ra}  B {rb}")
        lines.append("")
        if not self.causes:
            lines.append("no likely cause found: the two states agree where they should")
        for i, c in enumerate(self.causes, 1):
            lines.append(f"{i}. [{c.score:.2f}] {c.title} ({c.cause})")
            lines += [f"     - {e}" for e in c.evidence]
            if c.hint:
                lines.append(f"     → {c.hint}")
        return "\n".join(lines)
