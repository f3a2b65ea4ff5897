"""DeepSpeed's ``latest``: the tag, as ``save_checkpoint`` writes it (``fd.write(tag)``, no
newline), when exactly one tag folder holds state files."""

from __future__ import annotations

from pathlib import Path

from ..loadable.damaged import DS_STATES, deepspeed_tags
from ..loadable.files import Listing
from .plan import RepairPlan
from .shards import Refused


def deepspeed_latest(folder: Path, listing: Listing) -> RepairPlan:
    tags = deepspeed_tags(folder, listing)
    if len(tags) != 1:
        raise Refused(
            f"{len(tags)} tags ({', '.join(tags)}): which was saved last is not recorded; "
            "pass tag= to load_checkpoint, or write latest yourself"
        )
    tag = tags[0]
    files = sorted(p.name for p in (folder / tag).iterdir() if DS_STATES.fullmatch(p.name))
    return RepairPlan(
        folder,
        "DeepSpeed 'latest' tag file",
        "latest",
        tag.encode("utf-8"),
        tuple(f"{tag}/{f}" for f in files),
        expect={"tag": tag},
    )
