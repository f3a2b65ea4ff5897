"""``ckpt-explorer diff``: two checkpoints compared tensor by tensor."""

from __future__ import annotations

import argparse

from ._shared import add_node_options, nodes, print_json
from .exits import EXIT_DIFFERENT, EXIT_OK

NAME = "diff"
HELP = "compare two checkpoints tensor by tensor (exit 0 equal, 1 different, 2 unreadable)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--json", action="store_true", help="print the JSON report")
    p.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default 0)")
    p.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default 0)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    p.add_argument("--nproc", type=int, default=1, help="processes (torchrun job when > 1)")
    add_node_options(p)
    p.add_argument(
        "--rename",
        nargs="+",
        action="extend",
        default=[],
        metavar="OLD=NEW",
        help="replace OLD with NEW in A's names when pairing",
    )
    p.add_argument("--chunk-mib", type=int, default=32, help="chunk size in MiB (default 32)")
    p.add_argument("--limit", type=int, default=40, help="differing tensors to print")


def run(args: argparse.Namespace) -> int:
    from ..diff import diff_checkpoints
    from ..diff.align import parse_rename

    result = diff_checkpoints(
        args.a,
        args.b,
        atol=args.atol,
        rtol=args.rtol,
        rename=parse_rename(args.rename) or None,
        device=args.device,
        nproc=args.nproc,
        chunk_bytes=args.chunk_mib * 2**20,
        nodes=nodes(args),
    )
    if args.node_rank > 0:  # every node has the report; the first one prints it
        return EXIT_OK if result.equal else EXIT_DIFFERENT
    if args.json:
        print_json(result.to_json())
    else:
        print(result.format_text(limit=args.limit))
    # an export: a tensor proven beyond its budget (or unpaired) fails; "cannot tell" does not
    ok = result.export_verdict != "not_faithful" if result.is_export else result.equal
    return EXIT_OK if ok else EXIT_DIFFERENT
