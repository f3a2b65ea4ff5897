"""The entry points: detect a checkpoint's format, open it as a lazy view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .types import Detection
from .view import CheckpointView


def _explain_damaged(path: Path) -> tuple[str, str] | None:
    """What a folder no format fits holds when it is a damaged layout, and what to do (the
    loader checks of :mod:`ckpt_explorer.loadable`, imported only when detection failed)."""
    from .loadable import explain_damaged as explain

    return explain(path)


def detect_format(path: str | Path) -> Detection:
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

        local = mirror_for(str(path)).local
        return replace(detect(local, _explain_damaged)[0], path=str(path))
    return detect(path, _explain_damaged)[0]


def open_checkpoint(
    path: str | Path,
    model: str | Path | CheckpointView | None = None,
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
        detection, spec = detect(path, _explain_damaged)
        view = spec.open(Path(path), detection)
        model_view = None
        if model is not None:
            model_view = model if isinstance(model, CheckpointView) else open_checkpoint(model)
        return attach_names(view, model_view)


def as_view(
    x: str | Path | CheckpointView, model: str | Path | CheckpointView | None = None
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
