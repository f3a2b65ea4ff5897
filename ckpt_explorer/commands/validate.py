"""``ckpt-explorer validate``: a model, optimizer or training state checked by the rules."""

from __future__ import annotations

import argparse

from ._shared import print_json
from .exits import EXIT_DIFFERENT, EXIT_OK

NAME = "validate"
HELP = "check a model, optimizer or training state (exit 1 on errors, 2 unreadable)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path")
    p.add_argument("--json", action="store_true", help="print findings and summary as JSON")
    p.add_argument("--model", help="model checkpoint for an optimizer saved on its own")
    p.add_argument("--no-numeric", action="store_true", help="headers only: skip the value scan")
    p.add_argument("--hf-load", action="store_true", help="also load with from_pretrained")


def run(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from ..io.gc_pause import freeze_at_exit, gc_paused
    from ..validate import validate_checkpoint

    # headers only: the rules' objects hold no cycles (io/gc_pause.py); a numeric scan or
    # from_pretrained runs long enough, and through torch, to keep the collector on
    listing_only = args.no_numeric and not args.hf_load
    if listing_only:
        freeze_at_exit()
    with gc_paused() if listing_only else nullcontext():
        report = validate_checkpoint(
            args.path, model=args.model, numeric=not args.no_numeric, hf_load=args.hf_load
        )
    if args.json:
        print_json(report.to_json(), default=str)
    else:
        print(report.format_text())
    return EXIT_OK if report.ok else EXIT_DIFFERENT
