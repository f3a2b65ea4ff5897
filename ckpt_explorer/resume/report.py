"""The doctor's report: ranked causes with their evidence (plain dataclasses, JSON, text)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..readable import readable, readable_pair

if TYPE_CHECKING:
    import pandas as pd


def fact_text(text: str) -> str:
    """A fact's value as the report says it: ``None`` is "not recorded"."""
    return "not recorded" if text == "None" else text


def expectation(fact: str, values: Any, expected: dict[str, Any]) -> str:
    """``  (expected 8: as expected)`` after a counter, or what B should have said instead;
    "" when B's expected value is not known or not a counter's."""
    want = expected.get(fact)
    if want is None or isinstance(want, bool):
        return ""
    ok = as_expected(fact, values, expected)
    return f"  (expected {readable(want)}: {'as expected' if ok else 'NOT as expected'})"


def as_expected(fact: str, values: Any, expected: dict[str, Any]) -> bool | None:
    """Whether B says what it should after resuming from A (None: not known); a counter
    within one step (or 2 %: skipped fp16 steps), as the doctor's rules allow."""
    if fact not in expected:
        return values[0] == values[1]
    want = expected[fact]
    if want is None:
        return None
    if isinstance(want, bool) or not isinstance(values[1], int | float):
        return bool(values[1] == want)
    return abs(values[1] - want) <= max(1.0, 0.02 * abs(want))


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
    expected: dict[str, Any] = field(default_factory=dict)  # fact -> what B should say

    def __post_init__(self) -> None:
        self.causes = sorted(self.causes, key=lambda c: -c.score)

    @property
    def top(self) -> Cause | None:
        return self.causes[0] if self.causes else None

    # a to_json field list: alike in shape with other records' only
    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "facts": self.facts,
            "expected_b": self.expected,
            "causes": [c.to_dict() for c in self.causes],
        }

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        rows = [{**c.to_dict(), "evidence": "; ".join(c.evidence)} for c in self.causes]
        return pd.DataFrame(rows, columns=["cause", "title", "score", "evidence", "hint"])

    def format_text(self) -> str:
        lines = [f"resume doctor: A = {self.a}", f"               B = {self.b}", ""]
        for k, v in self.facts.items():
            ra, rb = (fact_text(x) for x in readable_pair(v[0], v[1]))
            lines.append(f"  {k}: A {ra}  B {rb}{expectation(k, v, self.expected)}")
        lines.append("")
        if not self.causes:
            lines.append("no likely cause found: the two states agree where they should")
        for i, c in enumerate(self.causes, 1):
            lines.append(f"{i}. [{c.score:.2f}] {c.title} ({c.cause})")
            lines += [f"     - {e}" for e in c.evidence]
            if c.hint:
                lines.append(f"     → {c.hint}")
        return "\n".join(lines)
