"""The entry points: detect a checkpoint's format, open it as a lazy view."""

from __future__ import annotations

from dataclasses import replace
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
    from .readers.optimizer_info import infer_param_names, keeps_parameter_order, state_shapes

    detection, spec = detect(path)
    view = spec.open(Path(path), detection)
    if model is not None and view.optimizer is not None:
        model_view = model if isinstance(model, CheckpointView) else open_checkpoint(model)
        info = infer_param_names(view.optimizer, state_shapes(view.tensors), model_view.tensors)
        files = [f.path for f in model_view.files]
        if not keeps_parameter_order(model_view.family, files):
            info = replace(
                info,
                name_source=info.name_source + f" (unreliable: {model_view.family} "
                "does not keep parameter order)",
            )
        view = view.with_optimizer(info)
    return view
