"""Who can load this? Each real loader's own file resolution, restated without importing it.

``loader_table(path)`` says, for ColossalAI 0.5.0 ``load_model`` / ``load_optimizer`` /
``load_lr_scheduler``, transformers ``from_pretrained`` (5.x and 4.x), ``torch.load`` (the
installed torch's defaults), accelerate ``load_state``, DeepSpeed ``load_checkpoint`` and DCP
``load``: which files each would read, whether it succeeds, and if not the message it raises.

Example:
    >>> table = loader_table("run/epoch-1_step-3")   # doctest: +SKIP
    >>> [(v.loader, v.target, v.outcome) for v in table.verdicts]   # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

from ..errors import CkptExplorerError
from ..io.location import Location, as_location
from . import accelerate, colossalai, conflicts, damaged, dcp, deepspeed, torch_load, transformers
from .files import torch_version
from .layout import targets
from .verdicts import Conflict, Layout, LoaderTable, Verdict

# Every loader: (path, target, layout) -> verdicts; [] where it does not apply.
LOADERS = (
    colossalai.load_model,
    colossalai.load_optimizer,
    colossalai.load_lr_scheduler,
    transformers.from_pretrained,
    torch_load.torch_load,
    accelerate.load_state,
    deepspeed.load_checkpoint,
    dcp.load,
)


def has_table(path: str | Path | Location) -> bool:
    """Whether ``path`` gets a loader table: a local checkpoint. The loaders read local
    files; a remote checkpoint gets none (its listing reads structure only, and what they
    would do with it once downloaded is a question for that local copy)."""
    root = as_location(path)
    return root.local_path() is not None and root.exists()


def loader_table(path: str | Path | Location) -> LoaderTable:
    """The loader table of a local ``path`` and, for a training-state folder, of its
    parts."""
    local = as_location(path).local_path()
    if local is None:
        raise CkptExplorerError(str(path), "a local checkpoint for the loader table", "a URL")
    root = local
    layouts = targets(root)
    verdicts: list[Verdict] = []
    found: list[Conflict] = []
    for target, layout in layouts.items():
        p = root / target if target else root
        rows = [v for loader in LOADERS for v in loader(p, target, layout)]
        verdicts += rows
        found += conflicts.find(root, target, rows)
    return LoaderTable(str(root), layouts, tuple(verdicts), tuple(found), torch_version())


def explain_damaged(path: Path | Location) -> tuple[str, str] | None:
    """(what was found, what to do) for a damaged folder, for a detection error: the layout,
    what the loader it was written for does with it, and the repair."""
    layout = damaged.recognise(path)
    if layout is None:
        return None
    found = f"{layout.damaged} ({'; '.join(layout.evidence)})"
    local = path.local_path() if isinstance(path, Location) else path
    # the loaders read local files
    verdicts = (v for f in LOADERS for v in f(local, "", layout)) if local is not None else ()
    for v in (v for v in verdicts if v.meant and v.outcome in ("fails", "silent")):
        said = f"{v.error}: {v.message}" if v.error else v.message
        found += f"; {v.label} would fail with {said}"
        break
    if layout.repair:
        todo = f"Run `ckpt-explorer repair {path}` to {layout.repair}."
    elif layout.form == "dcp":
        todo = "Copy .metadata again from the source: it maps every chunk and cannot be rebuilt."
    else:
        todo = "Copy the missing files again from the source."
    return found, todo


__all__ = [
    "Conflict",
    "Layout",
    "LoaderTable",
    "Verdict",
    "explain_damaged",
    "has_table",
    "loader_table",
]
