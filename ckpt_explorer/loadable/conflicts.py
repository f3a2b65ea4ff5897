"""Loaders that all succeed on one folder but read different weight files."""

from __future__ import annotations

import time
from pathlib import Path

from .verdicts import Conflict, Verdict

_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth")


def _weights(v: Verdict) -> tuple[str, ...]:
    return tuple(sorted(f for f in v.reads if f.endswith(_WEIGHTS)))


def _age(folder: Path, files: tuple[str, ...]) -> float | None:
    try:
        return max((folder / f).stat().st_mtime for f in files)
    except (OSError, ValueError):
        return None


def find(root: Path, target: str, verdicts: list[Verdict]) -> list[Conflict]:
    """One conflict per pair of distinct weight sets among the loaders that load ``target``."""
    groups: dict[tuple[str, ...], Verdict] = {}
    for v in verdicts:
        if v.ok and _weights(v):
            groups.setdefault(_weights(v), v)
    items = list(groups.items())
    folder = root / target if target else root
    out = []
    for i, (wa, a) in enumerate(items):
        for wb, b in items[i + 1 :]:
            msg = (
                f"{a.call.split('  #')[0]} reads {_short(wa)} but {b.call.split('  #')[0]} "
                f"reads {_short(wb)}: two loaders get different weights from one folder"
            )
            ta, tb = _age(folder, wa), _age(folder, wb)
            if ta is not None and tb is not None and abs(ta - tb) > 1:
                old = _short(wa if ta < tb else wb)
                msg += f"; {old} is older by {_ago(abs(ta - tb))} (stale?)"
            out.append(Conflict(target, a.loader, b.loader, wa, wb, msg))
    return out


def _short(files: tuple[str, ...]) -> str:
    return files[0] if len(files) == 1 else f"{files[0]} (+{len(files) - 1} more)"


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h"
    return time.strftime("%d days", time.gmtime(seconds)).lstrip("0")  # rough, for a hint
