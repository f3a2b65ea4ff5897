"""The ``ckpt-explorer timeline`` command (registered in commands/__init__.py)."""

from __future__ import annotations

import argparse
import json
import sys

from .cache import SummaryCache, default_cache_dir

NAME = "timeline"
HELP = "a run folder's checkpoints over time and its anomalies (exit 1 error found, 2 unreadable)"
PARSER_OPTIONS = {"conflict_handler": "resolve"}  # remote's --cache (same dest) may follow ours


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="the folder holding the run's checkpoints")
    p.add_argument("--json", action="store_true", help="checkpoints, anomalies, series as JSON")
    p.add_argument(
        "--cache",
        metavar="DIR",
        help=f"summary cache folder (default {default_cache_dir()}; never the run folder)",
    )
    p.add_argument("--no-cache", action="store_true", help="cache nothing on disk")
    p.add_argument("--watch", action="store_true", help="poll; print new checkpoints/anomalies")
    p.add_argument("--interval", type=float, default=5.0, help="--watch poll period (seconds)")
    p.add_argument("--detail", action="store_true", help="--json: per-tensor figures too")


def run(args: argparse.Namespace) -> int:
    """Exit 1 when an error-level anomaly is found, else 0 (2 comes from cli.main)."""
    folder = None if args.no_cache else (args.cache or default_cache_dir())
    cache = SummaryCache(folder)
    if args.watch:
        from .watch import watch

        def emit(line: str) -> None:
            print(line, flush=True)

        return watch(args.run_dir, cache, interval=args.interval, emit=emit)
    from .build import build_timeline  # the diff engine: only when a timeline is built

    t = build_timeline(args.run_dir, cache)
    if args.json:
        json.dump(t.to_json(detail=args.detail), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from .report import format_timeline

        print(format_timeline(t))
    return 1 if t.has_error else 0
