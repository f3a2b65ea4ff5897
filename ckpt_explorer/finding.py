"""One finding: what a rule (validate, the security gate, the loader checks) noticed, with a hint."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    """One thing a rule noticed.

    Attributes:
        rule: rule id, ``<module>.<what>`` (e.g. ``"integrity.missing_file"``).
        severity: ``"error"`` (will break loading or training), ``"warning"`` (probably
            wrong), ``"info"`` (worth knowing).
        message: what was found, naming the tensor, file or param id.
        hint: what to do about it.
        tensor, file, param_id: where it applies (None where it does not).
    """

    rule: str
    severity: str
    message: str
    hint: str = ""
    tensor: str | None = None
    file: str | None = None
    param_id: int | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
