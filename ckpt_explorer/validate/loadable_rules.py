"""``loadable.*``: what the real loaders would do with the checkpoint (``ckpt_explorer.loadable``).

- ``loadable.fails`` error: a loader the checkpoint was written for would raise (or, for
  DeepSpeed without ``latest``, load nothing); info for another loader that also accepts
  this layout (ColossalAI ``load_model`` on an HF folder).
- ``loadable.conflict`` warning: two loaders would read different weights from one folder.
- ``loadable.damaged`` error: the folder's index / metadata / ``latest`` is gone.
"""

from __future__ import annotations

from pathlib import Path

from ..io.location import Location, as_location
from ..loadable import has_table, loader_table
from .findings import Finding


def check_loadable(path: Path | Location) -> list[Finding]:
    """The findings of ``path``'s loader table; none for a remote checkpoint (the loaders
    read local files)."""
    if not has_table(path):
        return []
    local = as_location(path).local_path()
    assert local is not None
    path = local
    table = loader_table(path)
    out: list[Finding] = []
    for target, lay in table.layouts.items():
        if lay.damaged:
            hint = (
                f"Run `ckpt-explorer repair {path / target if target else path}` to {lay.repair}."
                if lay.repair
                else "Copy the missing files again."
            )
            out.append(
                Finding(
                    "loadable.damaged",
                    "error",
                    f"{target or path.name}: {lay.damaged}",
                    hint,
                    file=target or None,
                )
            )
    for v in table.verdicts:
        if v.outcome not in ("fails", "silent"):
            continue  # loads, or cannot tell (the table and `inspect` say why)
        if _interrupted(path / v.target if v.target else path):
            continue  # an interrupted pipeline save is integrity.interrupted_save's to say
        said = f"{v.error}: {v.message}" if v.error else v.message
        how = "would load nothing" if v.outcome == "silent" else "would fail"
        where = f"{v.target}: " if v.target else ""
        out.append(
            Finding(
                "loadable.fails",
                "error" if v.meant else "info",
                f"{where}{v.label} {how}: {said}",
                v.fix or "See `ckpt-explorer inspect` for the files each loader reads.",
                file=v.target or None,
            )
        )
    for c in table.conflicts:
        out.append(
            Finding(
                "loadable.conflict",
                "warning",
                c.message,
                "Remove the stale copy so that every loader reads the same weights.",
                file=c.target or None,
            )
        )
    return out


def _interrupted(folder: Path) -> bool:
    return folder.is_dir() and (folder / "tmp_index_files").is_dir()
