"""One exception tree for everything ckpt_explorer refuses to do.

Every error names the file, what was expected, what was found and what to do next, so that
the CLI can print it as one line and the dashboard can show it without a traceback.
"""

from __future__ import annotations


class CkptExplorerError(Exception):
    """Base class: an expected failure with a one-line explanation."""

    def __init__(
        self,
        path: object,
        expected: str,
        found: str,
        hint: str = "",
    ) -> None:
        self.path = str(path) if path is not None else None
        self.expected = expected
        self.found = found
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = f"{self.path}: " if self.path else ""
        text = f"{where}expected {self.expected}, found {self.found}"
        return f"{text}. {self.hint}" if self.hint else text


class FormatDetectionError(CkptExplorerError):
    """The path is not a checkpoint of any family ckpt_explorer knows."""


class CorruptCheckpointError(CkptExplorerError):
    """The file claims a structure that its bytes do not have."""


class TruncatedFileError(CorruptCheckpointError):
    """The file is shorter than its own header or index says (or a write is still running)."""


class UnsafeCheckpointError(CkptExplorerError):
    """The file asks for something that could run code or escape the checkpoint directory."""


class Cancelled(CkptExplorerError):
    """A job stopped at a cancel request before it finished."""


class MissingDependencyError(CkptExplorerError):
    """An optional package is needed for this operation."""
