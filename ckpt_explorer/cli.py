"""The ``ckpt-explorer`` command: thin argument parsing over the public API."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .commands.exits import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_DIFFERENT,
    EXIT_INTERNAL,
    EXIT_OK,
)
from .errors import CkptExplorerError

__all__ = ["EXIT_BAD_INPUT", "EXIT_DIFFERENT", "EXIT_INTERNAL", "EXIT_OK", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """One sub-parser per registered command (commands/__init__.py ``COMMANDS``)."""
    from .commands import COMMANDS

    parser = argparse.ArgumentParser(
        prog="ckpt-explorer",
        description="Open, inspect, compare, validate and convert training checkpoints.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        p = sub.add_parser(
            command.NAME, help=command.HELP, **getattr(command, "PARSER_OPTIONS", {})
        )
        command.add_arguments(p)
        p.set_defaults(func=command.run)
    from .remote.cli_args import add_remote_options

    add_remote_options(sub)  # --cache, --storage-option for URL arguments
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from .remote.cli_args import remote_arguments

        with remote_arguments(args):  # URL arguments opened as remote locations
            code = int(args.func(args))
            sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except CkptExplorerError as e:
        print(f"ckpt-explorer: error: {e.one_line()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError:
        return _internal_error(args, "ran out of memory")
    except RecursionError:
        return _internal_error(args, "hit Python's recursion limit")
    except OSError as e:
        where = getattr(e, "filename", None) or getattr(args, "path", "")
        print(
            f"ckpt-explorer: error: {where}: could not read ({e.__class__.__name__}: "
            f"{getattr(e, 'strerror', None) or e})",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


def _internal_error(args: argparse.Namespace, what: str) -> int:
    """The tool's own failure, said as the tool's: never as a damaged input."""
    where = getattr(args, "path", None) or " ".join(map(str, getattr(args, "paths", []) or []))
    print(
        f"ckpt-explorer: internal error: the tool {what} while working on {where or 'its input'}."
        " This is a failure of ckpt-explorer, not a sign that the file is damaged: free memory"
        " or retry on a larger machine, and report it (the command and the file's size) if it"
        " happens again.",
        file=sys.stderr,
    )
    return EXIT_INTERNAL


def _quiet_broken_pipe() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as Python's docs recommend.

    stdout is pointed at devnull so the interpreter's final flush cannot fail again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (tests)
        pass
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
