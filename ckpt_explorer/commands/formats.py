"""``ckpt-explorer formats``: the known formats."""

from __future__ import annotations

import argparse

from .exits import EXIT_OK

NAME = "formats"
HELP = "list the known formats"


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from ..formats import specs

    for spec in specs():
        print(f"{spec.target:4}  {spec.name:16}  {', '.join(spec.families)}")
    return EXIT_OK
