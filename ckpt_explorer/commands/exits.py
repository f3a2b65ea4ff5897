"""The command line's exit codes, shared by every command module."""

from __future__ import annotations

EXIT_OK, EXIT_DIFFERENT, EXIT_BAD_INPUT = 0, 1, 2
EXIT_INTERNAL = 3  # the tool failed (memory, recursion), not the input
EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a process ended by SIGPIPE
