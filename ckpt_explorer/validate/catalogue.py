"""The rule catalogue: every rule id that validate, the security gate and the loader checks
emit, registered once with its area, the severities it may take and one line of docs; and the
steps validate runs, in order.

Each area of validate is declared by a module of ``validate/areas/`` (``AREA = Area(...)``: its
rules and its steps) and registered by its one line in :data:`AREAS`. A rule id is
``<area>.<what>``; its area is the part of validate that runs it (``tied.*`` rules run with
``config``). README's rule table is generated from here (``scripts/rules_table.py``), and
``tests/validate/test_rule_catalogue.py`` fails on an id emitted anywhere in the package that is
not catalogued, and on a catalogued id that nothing emits.

To add a rule: emit it in its area's checks and add one ``declare(...)`` to its area's ``AREA``.
To add an area: one module ``validate/areas/<name>.py`` declaring ``AREA`` (``areas/tokenizer.py``
is the example) and its name on one line of :data:`AREAS`, where it belongs in the report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from importlib import import_module
from typing import NamedTuple

from .area import Area, Rule, Step

# The areas, one per line, in the order a report lists them as checked (an area is checked when
# one of its steps applied); each is declared by validate/areas/<name>.py. Their rules and their
# steps follow this order too, but where an area's AREA anchors them ahead of another area's.
AREAS: tuple[str, ...] = (
    "security",
    "integrity",
    "loadable",
    "quantized",
    "config",
    "tokenizer",
    "optimizer",
    "scheduler",
    "numeric",
    "bundle",
    "hf_load",
)


class Arranged(NamedTuple):
    """The catalogue's rules by id, and the steps of each phase, in order."""

    rules: dict[str, Rule]
    before_view: tuple[Step, ...]
    after_view: tuple[Step, ...]


def arrange(areas: Sequence[Area]) -> Arranged:
    """The rules and steps of ``areas`` (in the order of :data:`AREAS`): each area's after those
    of the areas above it, but those anchored ``before`` another area, which go right ahead of
    that area's. Raises on an area or rule id given twice, a rule or step of another area, an
    anchor naming no area."""
    names = [a.name for a in areas]
    counts = Counter([*names, *(r.id for a in areas for r in a.rules)])
    twice = sorted(k for k, n in counts.items() if n > 1)
    if twice:
        raise ValueError(f"registered twice: {twice}")
    stray = [r.id for a in areas for r in a.rules if r.area != a.name]
    stray += [f"{a.name}: {s.run.__name__}" for a in areas for s in a.steps if s.area != a.name]
    if stray:
        raise ValueError(f"rules or steps declared in another area's AREA: {stray}")

    def place(own: str, before: str | None) -> float:
        if before is not None and before not in names:
            raise ValueError(f"{own} is anchored before {before}, which is no area")
        return names.index(before) - 0.5 if before is not None else names.index(own)

    ordered = sorted(areas, key=lambda a: place(a.name, a.rules_before))  # stable: ties in order
    steps = [s for a in areas for s in a.steps]
    by_place = sorted(steps, key=lambda s: place(s.area, s.before))
    return Arranged(
        {r.id: r for a in ordered for r in a.rules},
        tuple(s for s in by_place if s.before_view),
        tuple(s for s in by_place if not s.before_view),
    )


def _declared(name: str) -> Area:
    area: Area = import_module(f"{__package__}.areas.{name}").AREA
    if area.name != name:
        raise ValueError(f"validate/areas/{name}.py declares the area {area.name}")
    return area


REGISTERED: dict[str, Area] = {name: _declared(name) for name in AREAS}
RULES, BEFORE_VIEW, AFTER_VIEW = arrange(list(REGISTERED.values()))


def rules(area: str | None = None) -> list[Rule]:
    """The catalogue, in order (one area's rules with ``area``)."""
    return [r for r in RULES.values() if area is None or r.area == area]
