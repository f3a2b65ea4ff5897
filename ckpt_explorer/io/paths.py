"""Resolve file names found inside indexes without letting them escape the checkpoint."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TypeVar

from ..errors import CorruptCheckpointError, UnsafeCheckpointError
from .location import Location

T = TypeVar("T")


def resolve_inside(root: Location, name: str, source: Location) -> Location:
    """Join ``name`` (from ``source``, an index or metadata file) under ``root``.

    Raises:
        UnsafeCheckpointError: ``name`` is absolute, contains ``..``, or resolves (through
            symlinks) outside ``root``.
    """
    pure = PurePosixPath(name.replace("\\", "/"))
    if (
        not name
        or pure.is_absolute()
        or ".." in pure.parts
        or (pure.parts and ":" in pure.parts[0])
    ):
        raise UnsafeCheckpointError(
            source,
            "a file name relative to the checkpoint directory",
            repr(name),
            "Fix the index; ckpt_explorer never reads files outside the checkpoint.",
        )
    joined = root.joinpath(*pure.parts)
    real_root = root.resolve()
    try:
        real = joined.resolve()
    except (OSError, RuntimeError) as e:  # symlink loops
        raise UnsafeCheckpointError(source, "a resolvable file name", f"{name!r} ({e})") from e
    inside = real.pure == real_root.pure or real_root.pure in real.pure.parents  # one store
    if not inside:
        raise UnsafeCheckpointError(
            source,
            f"{name!r} to stay inside {root}",
            f"it resolves to {real}",
            "A symlink points out of the checkpoint; copy the real file in instead.",
        )
    return joined


def found_in(path: Location, found: T | None, expected: str) -> T:
    """What a reader's search below ``path`` found (its folder and facts).

    Raises:
        CorruptCheckpointError: nothing was found (``expected`` says what was looked for).
    """
    if found is None:
        raise CorruptCheckpointError(path, expected, "none")
    return found


def key_prefix(root: Location, folder: Location) -> str:
    """``folder`` as a prefix of names below ``root``: ``""`` for ``root``, else ``"a/b/"``."""
    return "" if folder == root else folder.relative_to(root).as_posix() + "/"
