"""``ckpt-explorer inspect``: a checkpoint's format, files and tensors."""

from __future__ import annotations

import argparse
import sys

from .exits import EXIT_OK

# Every command module declares NAME, HELP and add_arguments alike: the command table reads them.
NAME = "inspect"
HELP = "list a checkpoint's format, files and tensors"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.add_argument("--model", help="model checkpoint that names an optimizer's param ids")
    p.add_argument("--limit", type=int, default=40, help="tensor rows to print (default 40)")
    p.add_argument("--all", action="store_true", help="print every tensor")


def run(args: argparse.Namespace) -> int:
    from ..io.gc_pause import freeze_at_exit, gc_paused

    freeze_at_exit()
    with gc_paused():  # the listing and its report hold no cycles (io/gc_pause.py)
        return _inspect(args)


def _inspect(args: argparse.Namespace) -> int:
    from ..api import open_checkpoint
    from ..inspect_report import format_inspect, inspect_report

    view = open_checkpoint(args.path, model=args.model)
    if args.json:
        from ..json_stream import tensor_lines, write_json

        report = inspect_report(view, tensors=False)
        write_json(report, sys.stdout, {"tensors": tensor_lines(view.tensors)})
    else:
        print(format_inspect(view, limit=None if args.all else args.limit))
    return EXIT_OK
