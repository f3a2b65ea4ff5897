"""``torch.load(path)`` with the installed torch's defaults (``weights_only=True`` since 2.6):
refused globals are found with the security gate's copy of torch's own tables."""

from __future__ import annotations

from pathlib import Path

from .files import is_safetensors, is_torch_file, refused_global, weights_only_default
from .model import Layout, Verdict

LOADER = "torch.load"
KINDS = ("model-file", "optimizer-file", "scheduler-file", "torch-file")


def _lightning(layout: Layout) -> bool:
    from ..readers.torch_pickle import LIGHTNING_EVIDENCE

    return any(e.startswith(LIGHTNING_EVIDENCE) for e in layout.evidence)


def torch_load(p: Path, target: str, layout: Layout) -> list[Verdict]:
    if layout.kind not in KINDS or not p.is_file():
        return []
    wo = weights_only_default()
    call = f"torch.load({str(p)!r})  # weights_only={wo}"
    if is_safetensors(p) and not is_torch_file(p):
        return [
            Verdict(
                LOADER,
                call,
                target,
                "fails",
                (p.name,),
                "UnpicklingError",
                "",
                "It is a safetensors file: use safetensors.torch.load_file.",
                False,
            )
        ]
    g = refused_global(p) if wo else None
    if g is not None:
        # not counted against the file (info): the code that reads such a file passes
        # weights_only=False itself, and security.weights_only_refused already says it
        fix = f"It names {g}: pass weights_only=False only if you trust the file, or "
        fix += "allow-list it with torch.serialization.add_safe_globals."
        if _lightning(layout):
            fix = f"It names {g}. A PyTorch Lightning checkpoint: Lightning's own loader "
            fix += "(Trainer.fit(ckpt_path=...), load_from_checkpoint) reads it with "
            fix += "weights_only=False."
        return [
            Verdict(
                LOADER,
                call,
                target,
                "fails",
                (p.name,),
                "UnpicklingError",
                "Weights only load failed",
                fix,
                False,
            )
        ]
    return [Verdict(LOADER, call, target, "loads", (p.name,), meant=True)]
