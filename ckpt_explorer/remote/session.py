"""Open a remote checkpoint: mirror its structure, read it with the local readers, and give
back a view whose tensor loads fetch exactly the bytes they need."""

from __future__ import annotations

import atexit
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from ..types import TensorRecord
from ..view import CheckpointView
from .guard import HoleReadError
from .mirror import Mirror
from .structure import fetch_structure

Need = Literal["structure", "all", "stream"]
_open: list[Mirror] = []
_lock = threading.Lock()


def mirror_for(
    url: str,
    need: Need = "structure",
    cache: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Mirror:
    """A mirror of ``url`` holding its structure (``need="structure"``), every byte (``"all"``,
    for commands that read tensor data other than through mapped reads), or its structure with
    every file streaming in behind it (``"stream"``: mapped reads wait for their bytes).
    Closed at interpreter exit."""
    m = Mirror(url, storage_options, cache)
    if need == "stream" and any(r.endswith(".distcp") for r in m.remote):
        need = "all"  # torch's DCP reader reads files itself, not through mapped reads
    try:
        if need == "all":
            m.ensure_whole()
        else:
            fetch_structure(m)
        if need == "stream":
            m.prefetch(_read_order(m))
    except BaseException:
        m.close()
        raise
    with _lock:
        _open.append(m)
    return m


def _read_order(m: Mirror) -> list[str]:
    """The files holding the checkpoint's tensors, in the order a front-to-back reader needs
    them (every file, by name, when the checkpoint cannot be opened)."""
    from ..api import open_checkpoint
    from ..errors import CkptExplorerError

    order: list[str] = []
    try:
        view = open_checkpoint(m.local)
        root = view.path if view.path.is_dir() else view.path.parent
        for record in view.disk_order():
            rel = m.rel_of(Path(str(root / record.file)))
            if rel is not None and rel not in order:
                order.append(rel)
    except CkptExplorerError:
        return sorted(m.remote)  # the command reports it; stream in name order meanwhile
    return order


def close_mirror(m: Mirror) -> None:
    """Close ``m`` now (its temp dir goes; a ``--cache`` mirror saves its range map)."""
    with _lock:
        if m in _open:
            _open.remove(m)
    m.close()


@atexit.register
def close_all() -> None:
    with _lock:
        mirrors = list(_open)
        _open.clear()
    for m in mirrors:
        m.close()


def open_remote(
    url: str,
    model: Any = None,
    cache: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> CheckpointView:
    """:func:`~ckpt_explorer.api.open_checkpoint` for a URL: listing moves only structure;
    ``view.load(name)`` fetches that tensor's byte ranges (parallel, retried) on demand."""
    from ..api import open_checkpoint

    m = mirror_for(url, "structure", cache, storage_options)
    if isinstance(model, str):
        from .urls import is_url

        if is_url(model):
            model = open_remote(model, None, cache, storage_options)
    view = open_checkpoint(m.local, model=model)
    return fetching_view(view, m)


def fetching_view(view: CheckpointView, m: Mirror) -> CheckpointView:
    """``view`` (read from ``m``'s tree) with loaders that fetch their ranges first."""
    tensors = tuple(
        replace(r, loader=_fetching(r, m, view)) if r.loader is not None else r
        for r in view.tensors
    )
    parts = {k: fetching_view(p, m) for k, p in view.parts.items()}
    out = CheckpointView(
        view.path,
        view.detection,
        view.files,
        tensors,
        view.values,
        parts,
        view.optimizer,
        view.warnings,
    )
    out.remote = m  # type: ignore[attr-defined]  # keeps the mirror alive with the view
    return out


def _fetching(record: TensorRecord, m: Mirror, view: CheckpointView) -> Any:
    loader = record.loader
    assert loader is not None
    root = view.path if view.path.is_dir() else view.path.parent
    target = root / record.file if record.file else root
    dcp_dir = target.parent if target.suffix == ".distcp" else None
    if dcp_dir is None and view.family == "torch-dcp":
        dcp_dir = root

    def load() -> Any:
        if dcp_dir is not None:  # torch's DCP loader reads .distcp files itself: whole files
            rels = [m.rel_of(Path(str(p))) for p in dcp_dir.glob("*.distcp")]
            m.ensure_whole(r for r in rels if r is not None)
        for _ in range(10_000):
            try:
                return loader()
            except HoleReadError as hole:  # a mapped read of a range not fetched yet
                rel = m.rel_of(hole.file)
                if rel is None:
                    raise
                m.ensure([(rel, hole.start, hole.end)])
        raise AssertionError("unreachable: each retry fetches a missing range")

    return load
