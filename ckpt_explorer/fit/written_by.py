"""Which parallel layout wrote a checkpoint, where its files show it (names, DCP chunks, padding).

Only what the files state is reported; a size the files do not show is left out, never guessed.
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from pathlib import Path

from ..errors import CkptExplorerError
from ..io.location import Location, as_location
from ..record_table import record_column
from ..types import TensorRecord
from ..view import CheckpointView
from .checks import padded_vocab

_STAGE = re.compile(r"-stage-(\d{5})(?:-(\d{5}))?-shard-\d{5}")
_MP = re.compile(r"(?:^|_)mp_rank_(\d+)_(?:model|optim)_states\.pt$")
_ZERO = re.compile(r"zero_pp_rank_(\d+)_mp_rank_\d+_(?:optim|model)_states\.pt$")
_DS_LAYER = re.compile(r"^layer_(\d+)-model_(\d+)-model_states\.pt$")
_DCP = re.compile(r"^__(\d+)_\d+\.distcp$")
_EMBED = re.compile(r"(embed_tokens|wte|word_embeddings|tok_embeddings)\.weight$")
MAX_FILES = 20000


@dataclass(frozen=True)
class LayoutClue:
    """One layout fact a checkpoint's files show: ``fact`` (e.g. "pp"), ``value``, ``evidence``."""

    fact: str
    value: str
    evidence: str

    def to_json(self) -> dict[str, str]:
        return {"fact": self.fact, "value": self.value, "evidence": self.evidence}


def _names(root: Location) -> list[str]:
    if root.is_file():
        return [root.name]
    local = root.local_path()
    out: list[str] = []
    if local is None:  # a remote folder: its listing
        for p in root.rglob("*"):
            if p.is_file():
                out.append(p.name)
                if len(out) > MAX_FILES:
                    break
        return out
    for _dir, _dirs, files in os.walk(local):
        out += files
        if len(out) > MAX_FILES:
            break
    return out


def _name_clues(names: list[str]) -> list[LayoutClue]:
    out = []
    stages = {m.group(1) for n in names if (m := _STAGE.search(n))}
    eps = {m.group(2) for n in names if (m := _STAGE.search(n)) and m.group(2)}
    if stages:
        out.append(
            LayoutClue(
                "pp",
                f">= {len(stages)}",
                f"ColossalAI pipeline shards '-stage-' for {len(stages)} stage(s): "
                + ", ".join(sorted(stages)),
            )
        )
    if eps:
        out.append(
            LayoutClue("ep", f">= {len(eps)}", f"ColossalAI stage/ep shard tags: {len(eps)}")
        )
    mp = {m.group(1) for n in names if (m := _MP.search(n))}
    if mp:
        out.append(
            LayoutClue(
                "mp", str(len(mp)), f"DeepSpeed model-parallel mp_rank_XX files: {sorted(mp)}"
            )
        )
    dp = {m.group(1) for n in names if (m := _ZERO.search(n))}
    if dp:
        out.append(
            LayoutClue("dp", str(len(dp)), f"DeepSpeed ZeRO partitions zero_pp_rank_N: {len(dp)}")
        )
    layers = {m.group(1) for n in names if (m := _DS_LAYER.match(n))}
    if layers:
        out.append(
            LayoutClue(
                "pipeline", "DeepSpeed PipelineModule", f"{len(layers)} layer_XX-model_states files"
            )
        )
    ranks = {m.group(1) for n in names if (m := _DCP.match(n))}
    if ranks:
        out.append(
            LayoutClue("ranks", str(len(ranks)), f"DCP data files __R_*.distcp: {len(ranks)}")
        )
    return out


def _dcp_clue(root: Location) -> list[LayoutClue]:
    if not (root / ".metadata").is_file():
        return []
    from ..readers.dcp.folder import read_metadata

    most, dims = 1, set()
    for item in read_metadata(root).state_dict_metadata.values():
        chunks = getattr(item, "chunks", None) or []
        if len(chunks) > 1:
            most = max(most, len(chunks))
            for d in range(len(chunks[0].offsets)):
                if len({c.offsets[d] for c in chunks}) > 1:
                    dims.add(d)
    if most == 1:
        return [LayoutClue("sharding", "none", "DCP metadata: every tensor saved whole")]
    return [
        LayoutClue(
            "sharding",
            f"up to {most} chunks per tensor",
            f"DCP metadata: tensors split along dim(s) {sorted(dims)} (FSDP / TP shards)",
        )
    ]


def _vocab_clue(tensors: Sequence[TensorRecord], vocab: int | None) -> list[LayoutClue]:
    if vocab is None:
        return []
    shapes = record_column(tensors, "shape")
    if max(map(operator.itemgetter(0), filter(None, shapes)), default=0) <= vocab:
        return []  # no tensor has more rows than the vocab (one C-level pass over 90k)
    names = record_column(tensors, "name")
    # 2-D tensors of more rows than the vocab, in order, picked by C-level loops
    two_d = list(compress(range(len(shapes)), map(operator.eq, map(len, shapes), repeat(2))))
    rows_of = map(operator.itemgetter(0), map(shapes.__getitem__, two_d))
    for i in compress(two_d, map(operator.lt, repeat(vocab), rows_of)):
        name, rows = names[i], shapes[i][0]
        if _EMBED.search(name):
            tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if padded_vocab(vocab, t) == rows]
            value = f"tp ∈ {{{', '.join(map(str, tps))}}}" if tps else "not ColossalAI's padding"
            return [
                LayoutClue(
                    "vocab_padding",
                    value,
                    f"{name} has {rows} rows for vocab_size {vocab}: {rows - vocab} padding rows",
                )
            ]
    return []


def layout_clues(
    path: str | Path | Location, tensors: Sequence[TensorRecord], vocab: int | None
) -> list[LayoutClue]:
    """Clues to the writing layout from file names, DCP chunk metadata and padded vocab rows.

    ``vocab`` must come from config.json: rows beyond it are padding; without it, nothing is said.
    """
    root = as_location(path)
    return _name_clues(_names(root)) + _dcp_clue(root) + _vocab_clue(tensors, vocab)


def view_clues(view: CheckpointView) -> list[LayoutClue]:
    """``layout_clues`` of an opened view, vocab from its config.json; [] when unreadable."""
    from .arch import facts_from_config, find_config, model_tensors

    try:
        vocab = None
        cfg_path = find_config(view.path)
        if cfg_path is not None:
            import json

            cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
            vocab = facts_from_config(cfg, str(cfg_path)).vocab if isinstance(cfg, dict) else None
        return layout_clues(view.path, model_tensors(view), vocab)
    except (CkptExplorerError, OSError, ValueError):
        return []
