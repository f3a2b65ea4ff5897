"""``ckpt-explorer rules``: the rule catalogue (every finding validate, the gate and the loader
checks can give), as text or JSON, optionally one area's."""

from __future__ import annotations

import argparse

from ..validate.catalogue import AREAS, rules
from ._shared import print_json
from .exits import EXIT_OK

NAME = "rules"
HELP = "list the rules validate checks: id, area, severities, what each finds"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the rules as JSON")
    p.add_argument("--area", choices=AREAS, help="only this area's rules")


def run(args: argparse.Namespace) -> int:
    chosen = rules(args.area)
    if args.json:
        print_json(
            [{"id": r.id, "area": r.area, "severities": r.severities, "doc": r.doc} for r in chosen]
        )
        return EXIT_OK
    width = max((len(r.id) for r in chosen), default=0)
    area = None
    for r in chosen:
        if r.area != area:
            area = r.area
            print(f"{area}:")
        print(f"  {r.id:{width}}  {'/'.join(r.severities):19}  {r.doc}")
    return EXIT_OK
