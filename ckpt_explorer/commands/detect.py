"""``ckpt-explorer detect``: which format a path is, and why."""

from __future__ import annotations

import argparse

from ._shared import print_json
from .exits import EXIT_OK

NAME = "detect"
HELP = "say which format a path is, and why"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from ..api import detect_format

    d = detect_format(args.path)
    if args.json:
        print_json(
            {
                "path": d.path,
                "format": d.family,
                "kind": d.kind,
                "detail": d.detail,
                "evidence": list(d.evidence),
            }
        )
    else:
        print(d.explain())
    return EXIT_OK
