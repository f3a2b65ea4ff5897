"""``torch.load(path)`` with the installed torch's defaults (``weights_only=True`` since 2.6):
refused globals are found with the security gate's copy of torch's own tables.

What the call does before it unpickles, in torch's order: a path ending in ``.safetensors``
goes to ``safetensors.torch.load_file`` (recent torch, by the suffix alone); a TorchScript
archive raises under ``weights_only=True`` (and is handed to ``torch.jit.load`` otherwise);
storages tagged with a CUDA device are restored there, which raises on a machine without
CUDA (``map_location="cpu"`` maps them to the CPU). ``torch.jit.load`` gets its own row for
TorchScript archives.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..io.dist_version import installed_version
from .files import (
    cuda_device_count,
    is_safetensors,
    is_torch_file,
    is_torchscript,
    refused_global,
    storage_devices,
    torch_load_dispatches_safetensors,
    weights_only_default,
)
from .verdicts import Layout, LoaderCall, Verdict

LOADER = "torch.load"
JIT_LOADER = "torch.jit.load"
KINDS = ("model-file", "optimizer-file", "scheduler-file", "torch-file")
NO_CUDA = "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False"


def _lightning(layout: Layout) -> bool:
    from ..readers.torch_pickle import LIGHTNING_EVIDENCE

    return any(e.startswith(LIGHTNING_EVIDENCE) for e in layout.evidence)


def torch_load(p: Path, target: str, layout: Layout) -> list[Verdict]:
    if not p.is_file():
        return []
    if layout.form not in KINDS and not (layout.form == "other" and is_torchscript(p)):
        return []
    wo = weights_only_default()
    v = LoaderCall(LOADER, f"torch.load({str(p)!r})  # weights_only={wo}", target)
    if p.name.endswith(".safetensors") and torch_load_dispatches_safetensors():
        return [_by_suffix(p, v)]
    if is_safetensors(p) and not is_torch_file(p):
        fix = "It is a safetensors file: use safetensors.torch.load_file" + (
            " (or name it *.safetensors: the installed torch.load hands that suffix "
            "to safetensors)."
            if torch_load_dispatches_safetensors()
            else "."
        )
        return [v.fails((p.name,), "UnpicklingError", "", fix)]
    if is_torchscript(p):
        return _torchscript(p, v, wo)
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
        return [v.fails((p.name,), "UnpicklingError", "Weights only load failed", fix)]
    if any(d.startswith("cuda") for d in storage_devices(p)):
        return [_gpu(p, v)]
    return [v.loads((p.name,), meant=True)]


def _by_suffix(p: Path, v: LoaderCall) -> Verdict:
    """The installed torch.load reads ``*.safetensors`` with safetensors' own loader."""
    note = ("by its .safetensors suffix, torch.load calls safetensors.torch.load_file",)
    if installed_version("safetensors") is None:
        message = "Attempting to load a safetensors file but safetensors is not installed"
        return v.fails((p.name,), "RuntimeError", message, "pip install safetensors.", notes=note)
    if not is_safetensors(p):
        fix = (
            "The name ends in .safetensors but the bytes are not safetensors (a torch.save "
            "file?): rename it to .pt or .bin for torch.load."
        )
        message = "Error while deserializing header"
        return v.fails((p.name,), "SafetensorError", message, fix, notes=note)
    return v.loads((p.name,), notes=note)


def _torchscript(p: Path, v: LoaderCall, wo: bool) -> list[Verdict]:
    runs = "it runs the TorchScript code the archive holds: load it only if you trust it"
    jit = LoaderCall(JIT_LOADER, f"torch.jit.load({str(p)!r})", v.target).loads(
        (p.name,), meant=True, notes=(f"a TorchScript model (torch.jit.save archive); {runs}",)
    )
    if not wo:
        note = "torch.load sees a TorchScript archive and hands it to torch.jit.load"
        return [v.loads((p.name,), notes=(note,)), jit]
    message = "Cannot use ``weights_only=True`` with TorchScript archives passed to ``torch.load``"
    fix = f"It is a TorchScript model, not a state_dict: torch.jit.load reads it ({runs})."
    return [v.fails((p.name,), "RuntimeError", message, fix), jit]


def _gpu(p: Path, v: LoaderCall) -> Verdict:
    """Storages tagged ``cuda:N``: torch.load restores them on that device."""
    devices = [d for d in storage_devices(p) if d.startswith("cuda")]
    shown = ", ".join(devices)
    count = cuda_device_count()
    fix = (
        f"Its storages are tagged {shown} (saved from a GPU): torch.load({str(p)!r}, "
        'map_location="cpu") reads it on any machine.'
    )
    if count == 0:
        return v.fails((p.name,), "RuntimeError", NO_CUDA, fix)
    wanted = max((_index(d) for d in devices), default=0)
    if wanted >= count:
        message = (
            f"Attempting to deserialize object on CUDA device {wanted} but "
            f"torch.cuda.device_count() is {count}"
        )
        return v.fails((p.name,), "RuntimeError", message, fix)
    note = f"its tensors go to {shown} (map_location='cpu' keeps them on the CPU)"
    return v.loads((p.name,), meant=True, notes=(note,))


def _index(device: str) -> int:
    m = re.fullmatch(r"cuda(?::(\d+))?", device)
    return int(m.group(1) or 0) if m else 0
