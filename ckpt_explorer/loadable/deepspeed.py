"""DeepSpeed ``engine.load_checkpoint(save_dir)`` with ``tag=None``
(``runtime/engine.py``): the tag is read from ``save_dir/latest``; without that file it logs a
warning and returns ``(None, None)`` having loaded nothing."""

from __future__ import annotations

from pathlib import Path

from .damaged import DS_STATES, deepspeed_tags
from .files import Listing
from .verdicts import Layout, LoaderCall, Verdict

LOADER = "deepspeed.load_checkpoint"
_NO_LATEST = (
    "Unable to find latest file at {latest}, if trying to load latest checkpoint please ensure "
    "this file exists or pass an explicit checkpoint tag when loading a checkpoint."
)


def load_checkpoint(p: Path, target: str, layout: Layout) -> list[Verdict]:
    if layout.form not in ("deepspeed", "deepspeed-tag"):
        return []
    v = LoaderCall(LOADER, f"engine.load_checkpoint({str(p)!r})", target)
    if layout.form == "deepspeed-tag":
        fix = (
            f"Pass the save folder and the tag: load_checkpoint({str(p.parent)!r}, tag={p.name!r})."
        )
        message = _NO_LATEST.format(latest=p / "latest")
        note = "this is a tag folder, not the save folder"
        return [v.silent(message, fix, meant=True, notes=(note,))]
    listing = Listing.of(p)
    latest = p / "latest"
    if not latest.is_file():
        tags = deepspeed_tags(p, listing)
        fix = (
            f"Run `ckpt-explorer repair {p}` (writes latest = {tags[0]!r}) or pass tag={tags[0]!r}."
            if len(tags) == 1
            else f"Pass tag= one of {', '.join(tags)}; which one is latest is not recorded."
        )
        message = _NO_LATEST.format(latest=latest)
        return [v.silent(message, fix, meant=True, notes=("returns (None, None) without raising",))]
    tag = latest.read_text(encoding="utf-8", errors="replace").strip()
    tag_dir = p / tag
    files = (
        sorted(n.name for n in tag_dir.iterdir() if DS_STATES.fullmatch(n.name))
        if tag_dir.is_dir()
        else []
    )
    if not files:
        message = f"'latest' names {tag!r}, which holds no model-states file"
        return [v.fails(("latest",), "", message, "Point latest at an existing tag.", meant=True)]
    return [v.loads(("latest", *(f"{tag}/{f}" for f in files)), meant=True)]
