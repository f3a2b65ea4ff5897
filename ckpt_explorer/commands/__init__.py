"""The command line's commands: one module each, registered in ``COMMANDS``.

A command module has ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> exit
code`` (and may have ``PARSER_OPTIONS``, keyword arguments of its sub-parser). To add a
command: one module here (or in the area that owns it, as ``timeline/command.py``) and one
entry in ``COMMANDS``; the order is the order of ``ckpt-explorer --help``.
"""

from __future__ import annotations

from types import ModuleType

from ..timeline import command as timeline
from . import (
    convert,
    demo,
    detect,
    diff,
    doctor,
    fit,
    formats,
    inspect,
    repair,
    rules,
    scan,
    serve,
    validate,
)

COMMANDS: tuple[ModuleType, ...] = (
    inspect,
    detect,
    formats,
    demo,
    diff,
    validate,
    rules,
    scan,
    timeline,
    doctor,
    convert,
    fit,
    repair,
    serve,
)
