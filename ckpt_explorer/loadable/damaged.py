"""Layouts recognised by their shards when the file that ties them together is gone: a
ColossalAI sharded model or optimizer without its index, an HF sharded folder without its
index, a DCP folder without ``.metadata``, a DeepSpeed save folder without ``latest``.

Used where detection finds no family, so a user hears what the folder is and what to do.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..io.location import Location
from .files import Listing
from .verdicts import Layout

_P = r"(?:\.[^.\-]+)?"  # ColossalAI's optional prefix component: pytorch_model.<prefix>-00001.bin
HF_MODEL_SHARD = re.compile(
    r"(model|pytorch_model)(?:\.[^-]+)?-(\d{5})-of-(\d{5})\.(safetensors|bin)"
)
CAI_MODEL_SHARD = re.compile(
    rf"(model|pytorch_model){_P}-(?:(\d{{5}})|stage-\d{{5}}(?:-\d{{5}})?-shard-\d{{5}})"
    r"\.(safetensors|bin)"
)
CAI_OPTIM_SHARD = re.compile(
    rf"(pytorch_optim|optimizer){_P}-(?:\d{{5}}|stage-\d{{5}}(?:-\d{{5}})?-shard-\d{{5}})"
    r"\.(bin|safetensors)"
)
CAI_GROUP = re.compile(rf"pytorch_optim_group{_P}\.bin")
DS_STATES = re.compile(r"(?:(?:bf16_)?zero_pp_rank_\d+_)?mp_rank_\d+_(?:model|optim)_states\.pt")


def deepspeed_tags(path: Path | Location, listing: Listing) -> list[str]:
    """Sub-folders holding DeepSpeed model/optimizer state files (the tags)."""
    tags = []
    for d in listing.dirs:
        try:
            if any(DS_STATES.fullmatch(p.name) for p in (path / d).iterdir()):
                tags.append(d)
        except OSError:
            continue
    return tags


def recognise(path: Path | Location, listing: Listing | None = None) -> Layout | None:
    """The damaged layout ``path`` is, or None when it is none of them (or not damaged)."""
    if not path.is_dir():
        return None
    listing = listing or Listing.of(path)
    if any(n.endswith(".distcp") for n in listing.files) and not listing.has(".metadata"):
        n = sum(n.endswith(".distcp") for n in listing.files)
        return Layout(
            "dcp",
            (f"{n} .distcp data file(s), no .metadata",),
            "torch DCP folder without .metadata",
            "",
        )
    tags = deepspeed_tags(path, listing)
    if tags and not listing.has("latest") and not listing.has("latest_universal"):
        repair = f"write latest = {tags[0]!r}" if len(tags) == 1 else ""
        return Layout(
            "deepspeed",
            (f"tag folder(s) {', '.join(tags[:4])} hold DeepSpeed state files, no 'latest'",),
            "DeepSpeed save folder without 'latest'",
            repair,
        )
    if listing.colossal_indexes():
        return None
    optim = listing.matching(CAI_OPTIM_SHARD)
    groups = listing.matching(CAI_GROUP)
    if optim or groups:
        shown = ", ".join((optim + groups)[:3])
        repair = (
            "rebuild the optimizer index from the shards and the group file"
            if (optim and groups)
            else ""
        )
        return Layout(
            "colossalai-optimizer",
            (f"ColossalAI optimizer shards / param-group file ({shown}), no index",),
            "ColossalAI sharded optimizer without its index"
            + ("" if groups else " (and without its param-group file)"),
            repair,
        )
    for form, shard, shards, who, repair in _MODEL_SHARDS:
        found = listing.matching(shard)
        if found:
            evidence = f"{len(found)} {shards} ({found[0]}), no index"
            return Layout(form, (evidence,), f"{who} sharded model without its index", repair)
    return None


# model shards without their index: layout form, shard name, what they are, writer, repair
_MODEL_SHARDS = (
    (
        "hf-model", HF_MODEL_SHARD, "HF -of-N shard(s)", "HF",
        "rebuild the index from the shards' headers",
    ),
    (
        "colossalai-model", CAI_MODEL_SHARD, "ColossalAI model shard(s)", "ColossalAI",
        "rebuild the index from the shards",
    ),
)  # fmt: skip
