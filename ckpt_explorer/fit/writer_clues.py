"""What a checkpoint's files say about the program that wrote them (beside its parallel layout).

A Hugging Face folder records no tp/pp layout (its shards hold whole tensors), but it does say
who wrote it: ``config.json``'s ``transformers_version`` and ``architectures``, the
``-of-N`` shard names of an index, the ``__metadata__`` of a safetensors header
(``{"format": "pt"}`` from safetensors' torch writer). Each fact is quoted with the file that
holds it; nothing is inferred beyond what a file states.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import CkptExplorerError
from ..view import CheckpointView
from .written_by import LayoutClue

_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.(safetensors|bin)$")
MAX_CONFIG_BYTES = 4 << 20


def _config_clues(folder: Path) -> list[LayoutClue]:
    from .arch import find_config

    cfg_path = find_config(folder)
    if cfg_path is None or cfg_path.stat().st_size > MAX_CONFIG_BYTES:
        return []
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    if not isinstance(cfg, dict):
        return []
    where = cfg_path.relative_to(folder).as_posix() if folder in cfg_path.parents else "config.json"
    out = []
    version = cfg.get("transformers_version")
    if isinstance(version, str) and version:
        out.append(LayoutClue("writer", f"transformers {version}", f"{where} transformers_version"))
    arch = cfg.get("architectures")
    if isinstance(arch, list) and arch and all(isinstance(a, str) for a in arch):
        out.append(LayoutClue("model", ", ".join(arch), f"{where} architectures"))
    return out


def _shard_clue(view: CheckpointView) -> list[LayoutClue]:
    shards = [m for f in view.files if (m := _SHARD.search(f.path))]
    if len(shards) < 2 and not (shards and int(shards[0].group(2)) == 1):
        return []
    totals = {m.group(2) for m in shards}
    total = int(next(iter(totals))) if len(totals) == 1 else len(shards)
    return [
        LayoutClue(
            "shards",
            f"{total} files, whole tensors",
            f"names model-XXXXX-of-{total:05d} (Hugging Face sharding: each tensor whole in "
            "one file, no tp/pp split)",
        )
    ]


def _metadata_clue(folder: Path, view: CheckpointView) -> list[LayoutClue]:
    from ..io.safetensors_header import read_header

    first = next((f.path for f in view.files if f.path.endswith(".safetensors")), None)
    if first is None:
        return []
    meta = read_header(folder / first).metadata
    if not meta:
        return []
    text = ", ".join(f"{k}={v}" for k, v in sorted(meta.items()))[:60]
    return [LayoutClue("metadata", text, f"safetensors header __metadata__ of {first}")]


def writer_clues(view: CheckpointView) -> list[LayoutClue]:
    """What the files of ``view`` say about their writer (see the module docstring); []
    when they say nothing or cannot be read."""
    root = Path(str(view.path))
    folder = root if root.is_dir() else root.parent
    out: list[LayoutClue] = []
    for find in (
        lambda: _config_clues(folder),
        lambda: _shard_clue(view),
        lambda: _metadata_clue(folder, view),
    ):
        try:
            out += find()
        except (CkptExplorerError, OSError, ValueError):
            continue
    return out
