"""How much a file that ``torch.load(weights_only=True)`` refuses matters, by its role.

Model and adapter weights are what people publish and load with torch's defaults: a refusal
there breaks every user (an error). The other parts of a training state — RNG states,
optimizer and scheduler states, run positions, pickled arguments — are read back by the
training code that wrote them (HF Trainer, accelerate, DeepSpeed, ColossalAI resume), which
loads them with its own safe globals or ``weights_only=False``; numpy RNG states and
DeepSpeed's enums are refused by torch's defaults in every clean checkpoint. There the refusal
is worth knowing (info), not a fault. Code execution is judged separately and always an error.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..finding import Finding
from ..io.location import Location, as_location
from ..view import CheckpointView

REFUSED = "security.weights_only_refused"
CODE = "security.code_execution"
STATE_KINDS = frozenset({"rng", "running_state", "args", "optimizer", "scheduler", "object"})
# Roles told by content alone (readers/roles.py, torch_pickle.classify) for a file the view
# does not own: the training_args.bin that Trainer.save_model writes beside the model it saves,
# an older DeepSpeed tag's optimizer file beside the one ``latest`` names.
CONTENT_KINDS = {
    "rng": "RNG states",
    "running_state": "a run position",
    "args": "training arguments",
    "optimizer": "optimizer states",
    "scheduler": "an LR scheduler state",
}


def file_kinds(view: CheckpointView) -> dict[str, set[str]]:
    """File path (relative to the view's root, as security findings name it) -> the kinds of
    every part stored in it (a one-file bundle holds several)."""
    root = view.path if view.path.is_dir() else view.path.parent
    out: dict[str, set[str]] = {}

    def walk(v: CheckpointView) -> None:
        if v.parts:
            for part in v.parts.values():
                walk(part)
            return
        base = v.path if v.path.is_dir() else v.path.parent
        # a part read from one file's entries (a scheduler inside common.pt) lists no files
        paths = [((base / f.path) if v.path.is_dir() else v.path, f.path) for f in v.files]
        for path, shown in paths or ([(v.path, v.path.name)] if v.path.is_file() else []):
            try:
                rel = path.relative_to(root).as_posix()
            except ValueError:
                rel = Path(shown).as_posix()
            out.setdefault(rel, set()).add(v.kind)

    walk(view)
    return out


def content_kind(path: Path | Location) -> str | None:
    """The role of a torch file told by its content (RNG states, run position, arguments)."""
    from ..errors import CkptExplorerError
    from ..readers import torch_pickle

    try:
        detection = torch_pickle.probe(as_location(path))
    except (CkptExplorerError, OSError, ValueError):
        return None
    kind = detection.kind if detection is not None else None
    return kind if kind in CONTENT_KINDS else None


TORCHSCRIPT_HINT = (
    "This file is a TorchScript model (a torch.jit.save archive), not a state_dict: "
    "torch.jit.load reads it, running the TorchScript code it holds (load it only if you "
    "trust it); torch.load refuses it under weights_only=True and hands it to torch.jit.load "
    "otherwise."
)


def _torchscript(path: Path | Location) -> bool:
    """A local zip with a ``<archive>/constants.pkl`` record: what torch.load takes for
    TorchScript."""
    import zipfile

    local = as_location(path).local_path()
    if local is None or not local.is_file():
        return False
    try:
        with zipfile.ZipFile(local) as zf:
            return any(n.partition("/")[2] == "constants.pkl" for n in zf.namelist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return False


def weigh_refusals(findings: list[Finding], view: CheckpointView) -> list[Finding]:
    """``findings`` with weights_only refusals of non-model training-state files made info
    (a file the view does not own is weighed by the role its content shows)."""
    kinds = file_kinds(view)
    root = view.path if view.path.is_dir() else view.path.parent
    with_code = {f.file for f in findings if f.rule == CODE}
    out = []
    for f in findings:
        if f.rule != REFUSED or f.severity != "error" or not f.file:
            out.append(f)
            continue
        if _torchscript(root / f.file):
            out.append(replace(f, severity="info", hint=TORCHSCRIPT_HINT))
            continue
        found = kinds.get(f.file)
        what = f"is the {', '.join(sorted(found or ()))} part of a training state"
        extra = ""
        if found and "model" in found and found - {"model"} and f.file not in with_code:
            # one file holding the whole training state (MAE / timm / fairseq save their
            # argparse.Namespace beside the weights); its objects are all inert, or a
            # code-execution finding would name them
            found = found - {"model"}
            what = "is a whole training state (weights beside its optimizer and run state)"
            extra = (
                "For the weights alone under a plain torch.load: ckpt-explorer convert "
                f"{f.file} OUT.safetensors --to safetensors --model-only. "
            )
        elif not found:
            kind = content_kind(root / f.file)
            found = {kind} if kind else set()
            what = f"holds {CONTENT_KINDS.get(kind or '')} (told by its content), no weights"
        if found and found <= STATE_KINDS:
            f = replace(
                f,
                severity="info",
                hint=(
                    f"This file {what}: the training code "
                    "that wrote it reads it back itself (with safe globals or "
                    "weights_only=False); only a plain torch.load with defaults refuses it. "
                    + extra
                    + (f.hint or "")
                ).strip(),
            )
        out.append(f)
    return out
