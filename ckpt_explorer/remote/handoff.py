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
from .locate import open_location
from .registry import RemoteStore

PREFIX = "ckpt-remote:"


def argument(where: str | os.PathLike[str] | Location, folder: Path, name: str) -> str:
    """The command-line form of ``where`` for a rank (``folder`` is the job's temp folder)."""
    if not isinstance(where, Location):
        return str(where)
    local = where.local_path()
    if local is not None:
        return str(local)
    store = _remote(where)
    spec = {
        "url": store.url,
        "options": store.options,
        "cache": store.cache_root,
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
    spec: dict[str, Any] = json.loads(Path(arg[len(PREFIX) :]).read_text())
    store = _remote(open_location(spec["url"], spec.get("options"), spec.get("cache")))
    rel = spec["path"]
    return store.location("" if rel == "." else rel)


def _remote(where: Location) -> RemoteStore:
    """The remote store ``where`` lies in (a registered store's ``open`` made it)."""
    store = where.store
    if not isinstance(store, RemoteStore):
        raise TypeError(f"{where}: not in a remote store ({type(store).__name__})")
    return store
