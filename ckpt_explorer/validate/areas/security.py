"""The security area: the gate's verdict of every file, before anything is opened."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..area import ERR, INFO, Area, Step, declare

if TYPE_CHECKING:
    from ..findings import Finding
    from ..run import Run


def _security(run: Run) -> list[Finding]:
    from ...security import security_findings

    return security_findings(run.root)


def _weigh_refusals(run: Run) -> list[Finding]:
    """A weights_only refusal is an error or info as the opened checkpoint tells."""
    from ...security.severity import weigh_refusals

    run.findings[:] = weigh_refusals(run.findings, run.opened)
    return []


# registered by its line in catalogue.AREAS; the declare(...) lines are catalogue entries, alike
# in shape by design. The rules of the gate (security/judge.py, security/scan.py).
AREA = Area(
    name="security",
    rules=(
        declare(
            "security.code_execution",
            ERR,
            "a plain load of the file runs code (the verdict unsafe)",
        ),
        declare(
            "security.ships_code",
            ERR,
            "the file is code a consumer imports or runs (the verdict code)",
        ),
        declare(
            "security.unverified",
            ERR,
            "a pickle the gate could not prove inert (the verdict unverified)",
        ),
        declare(
            "security.weights_only_refused",
            (ERR, INFO),
            "torch.load(weights_only=True) refuses the file",
        ),
        declare(
            "security.container",
            INFO,
            "a container (zip, tar, compressed stream) judged by its members",
        ),
    ),
    steps=(
        Step("security", _security, before_view=True),  # every pickle judged first
        Step("security", _weigh_refusals),
    ),
)
