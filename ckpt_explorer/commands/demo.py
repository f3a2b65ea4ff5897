"""``ckpt-explorer demo``: write a small training state and inspect it."""

from __future__ import annotations

import argparse
import sys

from .exits import EXIT_OK

NAME = "demo"
HELP = "write a small demo training state and inspect it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", default="ckpt-explorer-demo", help="folder to write (default ./ckpt-explorer-demo)"
    )
    p.add_argument("--limit", type=int, default=20)


def run(args: argparse.Namespace) -> int:
    from ..api import open_checkpoint
    from ..demo import make_demo
    from ..inspect_report import format_inspect

    root = make_demo(args.out)
    print(f"demo training state written to {root}\n", file=sys.stderr)
    print(format_inspect(open_checkpoint(root / "resumed_from"), limit=args.limit))
    return EXIT_OK
