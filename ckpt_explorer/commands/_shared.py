"""Argument pieces and result printing shared by several commands."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from ..errors import CkptExplorerError
from .exits import EXIT_DIFFERENT, EXIT_OK


def nodes(args: argparse.Namespace) -> Any:
    """The ``--nnodes`` part of a torchrun job (None on one node)."""
    from ..io.torchrun import nodes_from_args

    try:
        return nodes_from_args(args.nnodes, args.node_rank, args.rdzv_endpoint, args.rdzv_id)
    except ValueError as e:
        raise CkptExplorerError(None, "a consistent multi-node launch", str(e)) from e


def add_node_options(p: argparse.ArgumentParser) -> None:
    """``--nnodes`` and its rendezvous: the ``--nproc`` job over several nodes."""
    g = p.add_argument_group("several nodes (a shared filesystem; run on every node)")
    g.add_argument("--nnodes", type=int, default=1, help="nodes of the torchrun job")
    g.add_argument("--node-rank", type=int, default=0, help="this node (0 prints the result)")
    g.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="the first node's address")
    g.add_argument("--rdzv-id", help="job id shared by the nodes (default ckpt-explorer)")


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, found {text!r}")
    return int(text)


def print_json(obj: Any, **kw: Any) -> None:
    """``obj`` as indented JSON on stdout, with a final newline."""
    json.dump(obj, sys.stdout, indent=2, **kw)
    sys.stdout.write("\n")


def run_and_report(args: argparse.Namespace, plan: Any, run: Callable[[Any], Any], how: str) -> int:
    """Run a planned conversion (a progress bar on a terminal), then print its result: JSON,
    or a line with ``how`` it was written, its mismatches, notes and left-out tensors."""
    from ..convert.progress import ProgressBar

    bar = ProgressBar(sys.stderr) if sys.stderr.isatty() and not args.json else None
    try:
        result = run(bar)
    finally:
        if bar is not None:
            bar.close()
    if getattr(args, "node_rank", 0) > 0:  # every node has the result; the first prints it
        return EXIT_OK if result.verified else EXIT_DIFFERENT
    if args.json:
        print_json({"plan": plan.to_json(), "result": result.to_json()})
    else:
        from ..readable import human_bytes

        state = "verified" if result.verified else "NOT verified (nothing installed)"
        print(
            f"{result.destination}: {len(result.files)} file(s), {human_bytes(result.bytes)} "
            f"of tensors, {state}; {how} in {result.seconds:.2f} s, verified in "
            f"{result.verify_seconds:.2f} s"
        )
        for m in result.mismatches[: args.limit]:
            print(f"  mismatch: {m}")
        for n in result.notes:
            print(f"  note: {n}")
        for d in result.left_out:
            print(f"  left out: {d}")
    return EXIT_OK if result.verified else EXIT_DIFFERENT
