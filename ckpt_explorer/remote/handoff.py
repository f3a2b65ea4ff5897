"""Remote locations handed to the processes of a torchrun job.

A job's ranks are new processes: they reopen what the launcher opened. A local path goes as
itself; a remote location as ``ckpt-remote:<file>``, a JSON file (mode 0600, in the job's
private temp folder) holding the URL as given, its storage options and cache folder, so the
ranks read the same objects with the same credentials, and share the ``--cache`` folder
(safely: it is locked). Secrets never appear on a command line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..io.location import Location

PREFIX = "ckpt-remote:"


def argument(where: str | os.PathLike[str] | Location, folder: Path, name: str) -> str:
    """The command-line form of ``where`` for a rank (``folder`` is the job's temp folder)."""
    if not isinstance(where, Location):
        return str(where)
    local = where.local_path()
    if local is not None:
        return str(local)
    from .store import FsspecStore

    store = where.store
    assert isinstance(store, FsspecStore)
    spec = {
        "url": store.backend.url,
        "options": store.backend.options,
        "cache": str(store.cache.root) if store.cache is not None else None,
        "path": where.relative_to(store.base).as_posix(),
    }
    target = folder / f"remote-{name}.json"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(spec, f)
    return PREFIX + str(target)


def located(arg: str) -> str | Location:
    """What a rank opens for a command-line argument made by :func:`argument`."""
    if not arg.startswith(PREFIX):
        return arg
    from .store import open_url

    spec: dict[str, Any] = json.loads(Path(arg[len(PREFIX) :]).read_text())
    from .store import FsspecStore

    entry = open_url(spec["url"], spec.get("options"), spec.get("cache"))
    store = entry.store
    assert isinstance(store, FsspecStore)
    rel = spec["path"]
    return store.location("" if rel == "." else rel)
