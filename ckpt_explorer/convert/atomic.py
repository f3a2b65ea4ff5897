"""Atomic output: write into a temporary folder beside the destination, rename at the end.

The temporary folder is ``.<name>.tmp-<pid>`` in the destination's folder (same filesystem,
so the final rename is atomic); folders missing above the destination are made first and
removed again (while empty) when nothing is installed. A job killed at any moment leaves at most such a folder,
never a partial destination; the next job removes the folders of processes that are gone.
An existing destination is replaced only by a complete, verified output: a folder is swapped
in one ``renameat2(RENAME_EXCHANGE)`` where the kernel offers it, a file by ``os.replace``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

RENAME_EXCHANGE = 2
AT_FDCWD = -100


def temp_dir_for(destination: Path, pid: int | None = None) -> Path:
    return destination.parent / f".{destination.name}.tmp-{pid or os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(destination: Path) -> list[Path]:
    """Remove temporary folders of earlier jobs whose process no longer exists."""
    removed = []
    prefix = f".{destination.name}.tmp-"
    for p in destination.parent.glob(f"{prefix}*"):
        tail = p.name[len(prefix) :]
        if tail.isdigit() and not _alive(int(tail)) and int(tail) != os.getpid():
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def make_temp(destination: Path, pid: int | None = None) -> Path:
    tmp = temp_dir_for(destination, pid)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and folder under ``root``. The files are flushed side by side (up to
    8 at a time): a sharded output's writebacks then overlap and share journal commits,
    where one after the other each waits for its own."""
    paths: list[str] = []
    dirs: list[Path] = []
    for dirpath, _dirs, files in os.walk(root):
        paths += [os.path.join(dirpath, f) for f in files]
        dirs.append(Path(dirpath))
    if len(paths) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(8, len(paths)), thread_name_prefix="ckpt-fsync") as pool:
            list(pool.map(fsync_path, paths))  # re-raises the first error
    else:
        for path in paths:
            fsync_path(path)
    for d in reversed(dirs):  # folders after their files, deepest first
        fsync_dir(d)


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Flush one file's bytes to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where unsupported."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE)
    return rc == 0


def install(tmp: Path, destination: Path, output_is_dir: bool, overwrite: bool) -> None:
    """Move the finished output in ``tmp`` to ``destination`` and remove ``tmp``.

    For a folder output, ``tmp`` itself is the output; for a file output, the file is
    ``tmp / destination.name``.
    """
    parent = destination.parent
    if output_is_dir:
        if destination.exists() or destination.is_symlink():
            if not overwrite:
                raise FileExistsError(destination)
            if (
                destination.is_dir()
                and not destination.is_symlink()
                and _exchange(tmp, destination)
            ):
                fsync_dir(parent)
                shutil.rmtree(tmp)  # now holds the old output
                return
            aside = parent / f".{destination.name}.old-{os.getpid()}"
            os.replace(destination, aside) if not destination.is_dir() else destination.rename(
                aside
            )
            tmp.rename(destination)
            fsync_dir(parent)
            _remove(aside)
            return
        tmp.rename(destination)
        fsync_dir(parent)
        return
    produced = tmp / destination.name
    if destination.is_dir() and not destination.is_symlink():
        if not overwrite:
            raise FileExistsError(destination)
        aside = parent / f".{destination.name}.old-{os.getpid()}"
        destination.rename(aside)
        os.replace(produced, destination)
        fsync_dir(parent)
        _remove(aside)
    else:
        if destination.exists() and not overwrite:
            raise FileExistsError(destination)
        os.replace(produced, destination)
        fsync_dir(parent)
    shutil.rmtree(tmp, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def make_parents(destination: Path) -> list[Path]:
    """Create the missing folders above ``destination``; returns those made here, outermost
    first (a folder another job makes at the same moment is left to it)."""
    missing = []
    p = destination.parent
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    made = []
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            continue
        made.append(d)
    if made:
        fsync_dir(made[0].parent)
    return made


def remove_made(made: list[Path]) -> None:
    """Remove the folders :func:`make_parents` made, innermost first, while they are empty:
    a conversion that installs nothing leaves no trace."""
    for d in reversed(made):
        try:
            d.rmdir()
        except OSError:
            return


def discard(tmp: Path) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
