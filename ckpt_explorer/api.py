"""The entry points: detect a checkpoint's format, open it as a lazy view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .io.location import Location, as_location
from .types import Detection
from .view import CheckpointView


def detect_format(path: str | Path | Location) -> Detection:
    """The family and kind of ``path`` with the evidence that decided it.

    Raises:
        FormatDetectionError: nothing known fits; the message says what was found.

    Example:
        >>> detect_format("ckpt/optimizer").explain()  # doctest: +SKIP
        'colossalai-sharded-optimizer (optimizer): pytorch_optim.bin.index.json has ...'
    """
    from .formats import detect
    from .remote.urls import is_url

    if is_url(path):  # s3:// gs:// az:// http(s):// hf://: read from a structure-only mirror
        from dataclasses import replace

        from .remote.session import mirror_for

        return replace(detect(mirror_for(str(path)).local)[0], path=str(path))
    return detect(path)[0]


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
            listing then fetches only structure, ``load`` fetches the tensor's bytes.
        model: for an optimizer, a model checkpoint (path or view) whose tensor order gives
            parameter names to the optimizer's integer ids.
        cache: for a URL, a folder that keeps the fetched bytes (keyed by URL, ETag, size).
        storage_options: for a URL, fsspec options (credentials otherwise come from the
            backend's standard environment and config).

    Raises:
        CkptExplorerError: unreadable, corrupt, unsafe or unknown input (one-line message).
    """
    from .formats import detect
    from .io.gc_pause import gc_paused
    from .readers.param_names import attach_names
    from .remote.urls import is_url

    if is_url(path):
        from .remote.session import open_remote

        return open_remote(str(path), model, cache, storage_options)
    with gc_paused():  # a listing's objects hold no cycles (io/gc_pause.py)
        detection, spec = detect(path)
        view = spec.open(as_location(path), detection)
        model_view = None
        if model is not None:
            model_view = model if isinstance(model, CheckpointView) else open_checkpoint(model)
        return attach_names(view, model_view)
