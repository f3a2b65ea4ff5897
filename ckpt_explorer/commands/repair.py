"""``ckpt-explorer repair``: rebuild a lost index or ``latest`` from the shards."""

from __future__ import annotations

import argparse
import json

from ..errors import CkptExplorerError
from .exits import EXIT_DIFFERENT, EXIT_OK

NAME = "repair"
HELP = (
    "rebuild a lost index / latest from the shards: planned, atomic, verified "
    "(exit 0 verified, 1 not, 2 refused)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path")
    p.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from ..repair import plan_repair, run_repair

    plan = plan_repair(args.path)
    if plan.refused:
        raise CkptExplorerError(plan.folder, "a folder whose lost file can be rebuilt exactly",
                                f"{plan.what}: {plan.refused}")  # fmt: skip
    if args.dry_run:
        print(json.dumps({"plan": plan.to_json()}, indent=2) if args.json else plan.describe())
        return EXIT_OK
    result = run_repair(plan)
    if args.json:
        out = {"plan": plan.to_json(), "written": str(result.path), "verified": result.verified,
               "checks": list(result.checks)}  # fmt: skip
        print(json.dumps(out, indent=2))
    else:
        print(plan.describe())
        print(f"wrote {result.path}; " + ("verified" if result.verified else "NOT verified"))
        for c in result.checks:
            print(f"  {c}")
    return EXIT_OK if result.verified else EXIT_DIFFERENT
