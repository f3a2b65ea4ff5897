"""A root directory the dashboard may read: nothing outside it is listed or opened.

URLs go through the same gate: :class:`~.remote_paths.RemoteAccess` allows only those under
the ``serve --allow-remote`` prefixes (none by default), and gives their remote locations.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import overload

from ..errors import CkptExplorerError
from ..io.location import Location
from ..remote.urls import is_url, public
from .remote_paths import Need, RemoteAccess, RemoteRefusedError

# Files worth offering in the picker (folders are always offered).
CHECKPOINT_SUFFIXES = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".pkl",
    ".distcp",
    ".json",
    ".model",
)
MAX_DEPTH = 4
MAX_ENTRIES = 5000


class PathOutsideRootError(CkptExplorerError):
    """A path that resolves outside the dashboard's root directory."""


class RootGuard:
    """Resolves user-typed paths against ``root``; refuses anything that leaves it.

    Relative paths are taken from the root. ``..`` components are refused outright, absolute
    paths must lie under the root, and symlinks are resolved before the check, so a link that
    points outside is refused too.

    Example:
        >>> guard = RootGuard("/data/ckpts")                 # doctest: +SKIP
        >>> guard.resolve("run1/step-100")                   # doctest: +SKIP
        PosixPath('/data/ckpts/run1/step-100')
    """

    def __init__(self, root: str | Path, remote: RemoteAccess | None = None) -> None:
        path = Path(root).expanduser()
        if not path.is_dir():
            raise CkptExplorerError(root, "a directory to serve checkpoints from", "none")
        self.root = path.resolve()
        self.remote = remote if remote is not None else RemoteAccess()

    @overload
    def resolve(self, text: str | Path, remote: None = None) -> Path: ...

    @overload
    def resolve(self, text: str | Path, remote: Need) -> Path | Location: ...

    def resolve(self, text: str | Path, remote: Need | None = None) -> Path | Location:
        """The real path of ``text`` inside the root; for an allowed URL, when the caller
        reads URLs (``remote`` given), its location in a remote store (listed here, so call
        it from a background job).

        Raises:
            PathOutsideRootError: ``..``, an absolute path elsewhere, or a link leaving root.
            RemoteRefusedError: a URL where the view reads none, or one not allowed.
            CkptExplorerError: the path does not exist; a remote read failed.
        """
        raw = str(text).strip()
        if not raw:
            raise CkptExplorerError(None, "a path", "an empty string", "Pick a checkpoint.")
        if is_url(raw):
            if remote is None:
                raise RemoteRefusedError(
                    public(raw),
                    "a local path under the root",
                    "a URL",
                    "This view reads local paths only.",
                )
            return self.remote.locate(raw)
        p = Path(raw).expanduser()
        if ".." in p.parts:
            raise PathOutsideRootError(
                raw, f"a path inside {self.root}", "'..'", "Paths may not leave the root."
            )
        full = p if p.is_absolute() else self.root / p
        if not self._inside(Path(os.path.abspath(full))):
            raise PathOutsideRootError(
                raw, f"a path inside {self.root}", "a path outside it", "Choose a path under it."
            )
        if not full.exists():
            raise CkptExplorerError(raw, "an existing file or folder", "nothing there")
        real = full.resolve()
        if not self._inside(real):
            raise PathOutsideRootError(
                raw,
                f"a path inside {self.root}",
                f"a link to {real}",
                "Links may not leave the root.",
            )
        return real

    def later(self, text: str | Path, remote: Need = "all") -> Callable[[], Path | Location]:
        """Check ``text`` now (a local path resolved, a URL allowed); the returned call gives
        its path, listing a URL then (in the background job that reads it)."""
        raw = str(text).strip()
        if not is_url(raw):
            path = self.resolve(raw)
            return lambda: path
        url = self.check_url(raw)
        return lambda: self.resolve(url, remote)

    def check_url(self, url: str) -> str:
        """``url`` when the dashboard may read it (see :class:`RemoteAccess`)."""
        return self.remote.check(url)

    def relative(self, path: str | Path | Location) -> str:
        """``path`` (inside the root) as shown to users: relative, ``.`` for the root; a
        remote location as its URL."""
        if isinstance(path, Location):
            local = path.local_path()
            if local is None:
                return str(path)
            path = local
        if is_url(str(path)):
            return public(str(path))
        rel = Path(path).resolve().relative_to(self.root).as_posix()
        return rel or "."

    def candidates(self, max_depth: int = MAX_DEPTH, limit: int = MAX_ENTRIES) -> list[str]:
        """Folders and checkpoint-like files under the root, relative, breadth first.

        Hidden entries and links that leave the root are skipped; at most ``limit`` entries.
        """
        out: list[str] = []
        level = [self.root]
        for _ in range(max_depth):
            nxt: list[Path] = []
            for folder in level:
                try:
                    entries = sorted(os.scandir(folder), key=lambda e: e.name)
                except OSError:
                    continue
                for e in entries:
                    if e.name.startswith(".") or e.name == "__pycache__":
                        continue
                    path = Path(e.path)
                    try:
                        real = path.resolve()
                        is_dir = e.is_dir()
                    except (OSError, RuntimeError):  # RuntimeError: a link loop (3.11, 3.12)
                        continue
                    if not self._inside(real):
                        continue
                    if is_dir:
                        nxt.append(path)
                    elif not e.name.endswith(CHECKPOINT_SUFFIXES) and "." in e.name:
                        continue
                    out.append(path.relative_to(self.root).as_posix())
                    if len(out) >= limit:
                        return out
            level = nxt
        return out

    def _inside(self, p: Path) -> bool:
        return p == self.root or self.root in p.parents
