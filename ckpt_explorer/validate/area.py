"""The values an area of validate is declared with: :class:`Rule`, :class:`Step`, :class:`Area`.

An area module (``validate/areas/tokenizer.py``) declares ``AREA = Area(...)``: its rules and
its steps; its line in ``catalogue.AREAS`` places it. This module imports nothing of the
package, so an area module and the catalogue both read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .findings import Finding
    from .run import Run

ERR, WARN, INFO = "error", "warning", "info"
# a rule's area is its id's prefix, but these prefixes run with another area
AREA_OF_PREFIX = {"tied": "config"}


@dataclass(frozen=True)
class Rule:
    """One rule: ``id``, the validate ``area`` that runs it, the ``severities`` it may take
    (several where the context decides, e.g. a writer's own convention makes it info), and
    ``doc``, one line saying what it finds."""

    id: str
    area: str
    severities: tuple[str, ...]
    doc: str


def declare(id: str, severities: str | tuple[str, ...], doc: str) -> Rule:
    """A rule value, its area from its id's prefix (registered by the catalogue)."""
    prefix = id.split(".", 1)[0]
    sev = (severities,) if isinstance(severities, str) else severities
    return Rule(id, AREA_OF_PREFIX.get(prefix, prefix), sev, doc)


def _always(run: Run) -> bool:
    return True


@dataclass(frozen=True)
class Step:
    """One step of an area: its findings, when it applies (an area one of whose steps applied
    is listed in the report's ``checked``), and whether it runs before the checkpoint is opened
    (every pickle is judged first) or after. Steps run in the order of their areas in
    ``catalogue.AREAS``; ``before`` names an area whose steps of the same phase this one runs
    ahead of instead (it needs to run first: ``numeric``'s figures feed ``optimizer``'s rules)."""

    area: str
    run: Callable[[Run], list[Finding]]
    when: Callable[[Run], bool] = _always
    before_view: bool = False
    before: str | None = None


@dataclass(frozen=True)
class Area:
    """An area of validate: its ``name``, its ``rules`` and its ``steps``. Its line in
    ``catalogue.AREAS`` places its name in the report's ``checked`` list, its rules in the
    catalogue and its steps in each phase; ``rules_before`` names an area whose rules these are
    listed ahead of instead (each :class:`Step` has its own ``before``)."""

    name: str
    rules: tuple[Rule, ...]
    steps: tuple[Step, ...]
    rules_before: str | None = None
