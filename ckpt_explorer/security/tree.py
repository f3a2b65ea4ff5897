"""Every file under the paths given, links followed while they stay inside the scanned root.

A run folder often links its checkpoints (``latest -> checkpoint-1000``): such links are
followed and what they reach is judged once. A link that leaves the root reaches a file the
scan was not asked to judge, so it is never passed: it is listed with its target, and ``scan``
calls it unverified. Loops and dangling links are listed too (nothing can load them). A remote
location has no links: its listed objects are its files.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..io.location import Location


@dataclass(frozen=True)
class Link:
    path: Path
    target: str
    status: str  # "inside", "outside", "loop", "dangling"


@dataclass
class Tree:
    """Regular files to judge, other entries that cannot be judged, and the links met."""

    files: list[Path | Location] = field(default_factory=list)
    odd: list[tuple[Path, str]] = field(default_factory=list)  # (path, why it is not judged)
    links: list[Link] = field(default_factory=list)
    missing: list[tuple[Path | Location, str]] = field(default_factory=list)  # unreadable paths


def walk_paths(paths: list[Path | Location]) -> Tree:
    """The tree of files under ``paths`` (sorted; hidden files included): local paths as
    :class:`Path`, the objects of a remote location as locations."""
    tree = Tree()
    seen: set[str] = set()
    for given in paths:
        p = given.local_path() if isinstance(given, Location) else given
        if p is None:
            assert isinstance(given, Location)
            _walk_remote(given, tree)
            continue
        try:
            st = p.stat()
        except OSError as e:
            tree.missing.append((p, e.strerror or str(e)))
            continue
        if stat.S_ISDIR(st.st_mode):
            _walk_dir(p, os.path.realpath(p), tree, seen, set())
        else:
            _add_file(p, st, tree, seen)
    return tree


def _add_file(path: Path, st: os.stat_result, tree: Tree, seen: set[str]) -> None:
    real = os.path.realpath(path)
    if real in seen:
        return
    seen.add(real)
    if stat.S_ISREG(st.st_mode):
        tree.files.append(path)
    else:
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device or socket"
        tree.odd.append(
            (path, f"{kind}, not a regular file: what a loader reads from it cannot be judged")
        )


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _walk_dir(d: Path, root: str, tree: Tree, seen: set[str], stack: set[str]) -> None:
    real_d = os.path.realpath(d)
    if real_d in stack:
        return
    stack = stack | {real_d}
    try:
        entries = sorted(os.scandir(d), key=lambda e: e.name)
    except OSError as e:
        tree.odd.append(
            (d, f"a folder that cannot be listed ({e.strerror or e}): its files are not judged")
        )
        return
    for entry in entries:
        path = Path(entry.path)
        if entry.is_symlink():
            target = os.readlink(path)
            real = os.path.realpath(path)
            try:
                st = path.stat()
            except OSError as e:
                status = "loop" if e.errno == 40 else "dangling"  # ELOOP
                tree.links.append(Link(path, target, status))
                continue
            if not _inside(real, root):
                tree.links.append(Link(path, target, "outside"))
                continue
            if stat.S_ISDIR(st.st_mode) and real in stack:
                tree.links.append(Link(path, target, "loop"))
                continue
            tree.links.append(Link(path, target, "inside"))
            if stat.S_ISDIR(st.st_mode):
                _walk_dir(path, root, tree, seen, stack)
            else:
                _add_file(path, st, tree, seen)
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError as e:
            tree.odd.append((path, f"cannot be read ({e.strerror or e})"))
            continue
        if stat.S_ISDIR(st.st_mode):
            _walk_dir(path, root, tree, seen, stack)
        else:
            _add_file(path, st, tree, seen)


def _walk_remote(loc: Location, tree: Tree) -> None:
    if loc.is_file():
        tree.files.append(loc)
    elif loc.is_dir():
        tree.files += sorted(p for p in loc.rglob("*") if p.is_file())
    else:
        tree.missing.append((loc, "nothing listed at that URL"))
