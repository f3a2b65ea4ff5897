"""The entry points: detect a checkpoint's format, open it as a lazy view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .io.location import Location, PathLike, as_location
from .types import Detection
from .view import CheckpointView


def _explain_damaged(path: Location) -> tuple[str, str] | None:
    """What a folder no format fits holds when it is a damaged layout, and what to do (the
    loader checks of :mod:`ckpt_explorer.loadable`, imported only when detection failed)."""
    from .loadable import explain_damaged as explain

    return explain(path)


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

    return detect(locate(path, cache=cache, storage_options=storage_options), _explain_damaged)[0]


def open_checkpoint(
    path: PathLike,
    model: PathLike | CheckpointView | None = None,
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
        detection, spec = detect(where, _explain_damaged)
        view = spec.open(where, detection)
        model_view = None
        if model is not None:
            model_view = (
                model
                if isinstance(model, CheckpointView)
                else open_checkpoint(model, cache=cache, storage_options=storage_options)
            )
        return attach_names(view, model_view)


def as_view(
    x: PathLike | CheckpointView, model: PathLike | CheckpointView | None = None
) -> CheckpointView:
    """``x`` as an open view: a view as it is, a path (or URL) opened lazily.

    Args:
        x: a checkpoint path of any known family, a URL, or an open view.
        model: for an optimizer, a model checkpoint (path or view) whose tensor order gives
            parameter names to its integer ids (attached to a view given open, too).

    Raises:
        CkptExplorerError: as :func:`open_checkpoint`.

    Example:
        >>> view = as_view("run/step-6000")            # doctest: +SKIP
        >>> as_view(view) is view                      # doctest: +SKIP
        True
    """
    if not isinstance(x, CheckpointView):
        return open_checkpoint(x, model=model)
    if model is None:
        return x
    from .readers.param_names import attach_names

    return attach_names(x, as_view(model))
