"""``ckpt-explorer doctor``: likely causes of a loss jump between two states, ranked."""

from __future__ import annotations

import argparse

from ._shared import print_json
from .exits import EXIT_OK

NAME = "doctor"
HELP = "rank likely causes of a loss jump between two states"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="the state that was resumed from")
    p.add_argument("b", help="a state after resuming, or from a reference run")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-weights", action="store_true", help="skip the tensor-by-tensor diff")


def run(args: argparse.Namespace) -> int:
    from ..resume import resume_doctor

    report = resume_doctor(args.a, args.b, compare_weights=not args.no_weights)
    if args.json:
        print_json(report.to_json(), default=str)
    else:
        print(report.format_text())
    return EXIT_OK
