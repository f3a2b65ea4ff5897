"""The entry points: detect a checkpoint's format, open it as a lazy view."""

from __future__ import annotations

from pathlib import Path

from .types import Detection
from .view import CheckpointView


def detect_format(path: str | Path) -> Detection:
    """The family and kind of ``path`` with the evidence that decided it.

    Raises:
        FormatDetectionError: nothing known fits; the message says what was found.

    Example:
        >>> detect_format("ckpt/optimizer").explain()  # doctest: +SKIP
        'colossalai-sharded-optimizer (optimizer): pytorch_optim.bin.index.json has ...'
    """
    from .formats import detect

    return detect(path)[0]


def open_checkpoint(
    path: str | Path, model: str | Path | CheckpointView | None = None
) -> CheckpointView:
    """Open ``path`` lazily: listing reads only headers, indexes and pickle structure.

    Args:
        path: a checkpoint file or folder of any known family.
        model: for an optimizer, a model checkpoint (path or view) whose tensor order gives
            parameter names to the optimizer's integer ids.

    Raises:
        CkptExplorerError: unreadable, corrupt, unsafe or unknown input (one-line message).
    """
    from .formats import detect
    from .readers.param_names import attach_names

    detection, spec = detect(path)
    view = spec.open(Path(path), detection)
    model_view = None
    if model is not None:
        model_view = model if isinstance(model, CheckpointView) else open_checkpoint(model)
    return attach_names(view, model_view)
