"""Modules the package writes itself (the numba pair kernels of :mod:`.pair_source`), written
once to a cache folder and loaded from there: numba's ``cache=True`` keys compiled code on a
real source file, so a second process loads the kernels instead of compiling them.

The file lies in a folder named by its text's hash under ``$CKPT_EXPLORER_CACHE/kernels``,
else ``$XDG_CACHE_HOME/ckpt_explorer/kernels``, else ``~/.cache/ckpt_explorer/kernels``; where
none can be written (a read-only home), under a folder of this user's own in the temp folder
(made 0700 and checked to be the user's and writable by no one else; else a fresh private
one). The package's folder is never written, so a read-only install works. A file is written
when missing or not the text (atomically: a temp file renamed into place).

What runs is always the text the package generated in this process: it is compiled from
memory under the file's name (numba reads the file only to hash it into its cache key), so a
file changed on disk is never executed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

_loaded: dict[tuple[str, str], ModuleType] = {}
_lock = threading.Lock()


def cache_folders() -> Iterator[Path]:
    """Where generated modules may go, in order of preference (the first writable wins; the
    temp folder is made only when asked for)."""
    own = os.environ.get("CKPT_EXPLORER_CACHE")
    if own:
        yield Path(own) / "kernels"
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        yield Path(base) / "ckpt_explorer" / "kernels"
    yield _private_temp() / "kernels"


def _private_temp() -> Path:
    """This user's folder in the temp folder: made 0700, used only when it is a real folder
    of this user that no one else may write (else a fresh private folder)."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    folder = Path(tempfile.gettempdir()) / f"ckpt_explorer-{uid if uid is not None else 'user'}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(folder)
        if (
            stat.S_ISDIR(st.st_mode)
            and (uid is None or st.st_uid == uid)
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        ):
            return folder
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="ckpt_explorer-"))


def place(name: str, text: str) -> Path:
    """The file holding ``text`` (written now unless it already holds it); OSError when no
    cache folder can be written."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:20]
    filename = name.rpartition(".")[2] + ".py"
    error: OSError | None = None
    for folder in cache_folders():
        path = folder / digest / filename
        try:
            if _holds(path, text):
                return path
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
            return path
        except OSError as exc:
            error = exc
    assert error is not None
    raise error


def _holds(path: Path, text: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False


def load(name: str, text: str) -> ModuleType:
    """The module ``name`` made of ``text``: placed by :func:`place`, executed from ``text``
    (once per process and text)."""
    key = (name, text)
    with _lock:
        module = _loaded.get(key)
        if module is not None:
            return module
        path = str(place(name, text))
        spec = importlib.util.spec_from_loader(name, loader=None, origin=path)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        module.__file__ = path
        code = compile(text, path, "exec")
        sys.modules[name] = module
        try:
            exec(code, module.__dict__)  # the package's own generated text, never the file's
        except BaseException:
            sys.modules.pop(name, None)
            raise
        _loaded[key] = module
        return module
