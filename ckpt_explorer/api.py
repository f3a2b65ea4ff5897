"""The entry points: detect a checkpoint's format, open it as a lazy view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .io.location import Location, PathLike, as_location
from .types import Detection
from .view import CheckpointView


def locate(
    path: PathLike,
    *,
    cache: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Location:
    """Where ``path`` is: a local path, or a URL (``s3://``, ``gs://``, ``az://``,
    ``http(s)://``, ``hf://``) opened in a remote store (listed once; needs the ``remote``
    extra). A location is returned as it is."""
    from .remote.urls import is_url

    if isinstance(path, str) and is_url(path):
        from .remote.store import open_url

        return open_url(path, storage_options, cache)
    return as_location(path)


def detect_format(
    path: str | Path | Location,
    *,
    cache: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Detection:
    """The family and kind of ``path`` with the evidence that decided it.

    Raises:
        FormatDetectionError: nothing known fits; the message says what was found.

    Example:
        >>> detect_format("ckpt/optimizer").explain()  # doctest: +SKIP
        'colossalai-sharded-optimizer (optimizer): pytorch_optim.bin.index.json has ...'
    """
    from .formats import detect

    return detect(locate(path, cache=cache, storage_options=storage_options))[0]


def open_checkpoint(
    path: str | Path | Location,
    model: str | Path | Location | CheckpointView | None = None,
    *,
    cache: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> CheckpointView:
    """Open ``path`` lazily: listing reads only headers, indexes and pickle structure.

    Args:
        path: a checkpoint file or folder of any known family, or a URL (``s3://``, ``gs://``,
            ``az://``, ``http(s)://``, ``hf://repo[@rev]/path``; needs the ``remote`` extra):
            listing then reads only structure in byte ranges, ``load`` reads the tensor's
            bytes; or a :class:`~.io.location.Location`.
        model: for an optimizer, a model checkpoint (path, URL or view) whose tensor order
            gives parameter names to the optimizer's integer ids.
        cache: for a URL, a folder that keeps the fetched bytes (keyed by URL, ETag, size).
        storage_options: for a URL, fsspec options (credentials otherwise come from the
            backend's standard environment and config).

    Raises:
        CkptExplorerError: unreadable, corrupt, unsafe or unknown input (one-line message).
    """
    from .formats import detect
    from .io.gc_pause import gc_paused
    from .readers.param_names import attach_names

    where = locate(path, cache=cache, storage_options=storage_options)
    with gc_paused():  # a listing's objects hold no cycles (io/gc_pause.py)
        detection, spec = detect(where)
        view = spec.open(where, detection)
        model_view = None
        if model is not None:
            model_view = (
                model
                if isinstance(model, CheckpointView)
                else open_checkpoint(model, cache=cache, storage_options=storage_options)
            )
        return attach_names(view, model_view)
