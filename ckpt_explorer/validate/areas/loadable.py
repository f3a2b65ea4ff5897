"""The loadable area: each real loader's own resolution of the files (``loadable/``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..area import ERR, INFO, WARN, Area, Step, declare

if TYPE_CHECKING:
    from ..findings import Finding
    from ..run import Run


def _loadable(run: Run) -> list[Finding]:
    from ..loadable_rules import check_loadable

    return check_loadable(run.root)  # each real loader's own resolution, from the files


# registered by its line in catalogue.AREAS; the declare(...) lines are catalogue entries, alike
# in shape by design
AREA = Area(
    name="loadable",
    rules=(
        declare(
            "loadable.fails", (ERR, INFO), "a loader the checkpoint is meant for cannot load it"
        ),
        declare("loadable.damaged", ERR, "a file every loader reads is damaged"),
        declare(
            "loadable.conflict", WARN, "two loaders would read different weights (a stale copy)"
        ),
    ),
    steps=(Step("loadable", _loadable, lambda run: run.root.exists(), before_view=True),),
)
