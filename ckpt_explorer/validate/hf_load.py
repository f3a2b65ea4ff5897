"""HF loadability: ``from_pretrained`` on CPU, missing/unexpected keys, tensors that differ.

Runs only when transformers is importable and the folder has a ``config.json`` naming an
architecture. The model is built by transformers itself from the user's folder (the user asked
for it with ``hf_load=True``); ckpt_explorer's own reading never unpickles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..io.location import as_location
from .findings import Finding

if TYPE_CHECKING:
    from .parts import ModelPart

MAX_LISTED = 10


def _model_class(config: dict[str, Any]) -> Any:
    import transformers

    for arch in config.get("architectures") or []:
        cls = getattr(transformers, str(arch), None)
        if cls is not None:
            return cls
    return transformers.AutoModel


def _keys(keys: Any) -> list[str]:
    return sorted(str(k) for k in (keys or []))


def check_hf_load(model: ModelPart) -> list[Finding]:
    """Load ``model.folder`` with transformers and compare what it built with the files."""
    if model.folder is None or not model.config:
        return []
    place = as_location(model.folder)
    if not (place / "config.json").is_file():
        return []
    folder = place.local_path()
    if folder is None:
        return [
            Finding(
                "hf_load.skipped",
                "info",
                f"{place} is remote; from_pretrained reads a local folder",
                "Download the checkpoint to check its loadability with transformers.",
            )
        ]
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        return [
            Finding(
                "hf_load.skipped",
                "info",
                "transformers is not installed; the from_pretrained check did not run",
                "pip install transformers to check loadability.",
            )
        ]
    where = model.label.rstrip("/") or str(folder)
    try:
        cls = _model_class(model.config)
        loaded, info = cls.from_pretrained(
            str(folder), output_loading_info=True, device_map="cpu", dtype="auto"
        )
    except Exception as e:
        return [
            Finding(
                "hf_load.failed",
                "error",
                f"from_pretrained failed: {type(e).__name__}: {str(e)[:300]}",
                "Fix what the message names before publishing.",
                file=where,
            )
        ]
    out: list[Finding] = []
    for key, rule, severity, hint in (
        ("missing_keys", "hf_load.missing_keys", "error", "They were initialised randomly."),
        ("unexpected_keys", "hf_load.unexpected_keys", "warning", "transformers ignored them."),
        ("mismatched_keys", "hf_load.mismatched_keys", "error", "Shapes differ from the config."),
    ):
        keys = _keys(info.get(key))
        for k in keys[:MAX_LISTED]:
            k = k[0] if isinstance(k, tuple) else k
            out.append(
                Finding(
                    rule,
                    severity,
                    f"from_pretrained reports {k} as {key.replace('_', ' ')[:-1]}",
                    hint,
                    tensor=model.display(str(k)),
                )
            )
    state = loaded.state_dict()
    differing = 0
    for r in model.records:
        target = state.get(r.name)
        if target is None or tuple(target.shape) != tuple(r.shape):
            continue
        source = model.view.load(r.name)
        same = (
            torch.equal(target, source)
            if target.dtype == source.dtype
            else torch.equal(target, source.to(target.dtype))
        )
        if not same:
            differing += 1
            if differing <= MAX_LISTED:
                out.append(
                    Finding(
                        "hf_load.tensor_differs",
                        "error",
                        f"{r.name} as loaded by from_pretrained differs from the file",
                        "A tie, a conversion or a renaming rule changed it on load; the "
                        "published weights are not what users will get.",
                        tensor=model.display(r.name),
                    )
                )
    return out
