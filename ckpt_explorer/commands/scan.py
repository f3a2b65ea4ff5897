"""``ckpt-explorer scan``: the security verdict of every file under the paths."""

from __future__ import annotations

import argparse

from ._shared import print_json

NAME = "scan"
HELP = (
    "security verdict of every file under the paths: unsafe, code, unverified, safe or "
    "data, headers only (exit 1 unsafe, code or unverified; 2 unreadable)"
)


# add_argument lines alike in shape with every command module's: declarations, not logic.
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", help="files or folders (folders are walked recursively)")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.add_argument(
        "--allow-unverified",
        action="store_true",
        help="exit 0 when files could not be verified (only unsafe files fail); says so",
    )
    p.add_argument(
        "--allow-code",
        action="store_true",
        help="exit 0 when files are code a consumer imports or runs on request (Python modules, "
        "trust_remote_code files, TorchScript); says so",
    )


def run(args: argparse.Namespace) -> int:
    from ..security import scan_paths

    report = scan_paths(
        args.paths, allow_unverified=args.allow_unverified, allow_code=args.allow_code
    )
    if args.json:
        print_json(report.to_json(), default=str)
        return report.exit_code
    for v in report.verdicts:
        shown = f"  ({v.format})" if v.format else ""
        print(f"{v.verdict.upper():10}  {v.path}{shown}")
        for f in v.findings:
            if v.verdict in ("unsafe", "code", "unverified") and f.severity == "error":
                print(f"            {f.rule}: {f.message}")
            elif f.rule == "security.weights_only_refused":  # worth knowing, not a verdict
                print(f"            note: {f.message.split(': ', 1)[-1]}")
    for link in report.links:
        if link.status != "inside":
            print(f"LINK {link.status:6}  {link.path} -> {link.target}")
    for path, why in report.unreadable:
        print(f"UNREADABLE  {path}  ({why})")
    counts = ", ".join(
        f"{report.count(k)} {k}" for k in ("unsafe", "code", "unverified", "safe", "data")
    )
    allowed = [
        f"{what} files allowed by --allow-{what}"
        for what, on in (("code", args.allow_code), ("unverified", args.allow_unverified))
        if on
    ]
    note = f" ({'; '.join(allowed)})" if allowed else ""
    print(f"{report.files_seen} file(s): {counts} ({report.seconds:.2f} s){note}")
    return report.exit_code
