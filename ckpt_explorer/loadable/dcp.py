"""``torch.distributed.checkpoint.load(state_dict, checkpoint_id=folder)``: the
``FileSystemReader`` opens ``<folder>/.metadata`` first (a failure on any rank comes back
wrapped in ``CheckpointException``), then the ``.distcp`` files it names."""

from __future__ import annotations

from pathlib import Path

from ..errors import CkptExplorerError
from .verdicts import Layout, LoaderCall, Verdict

LOADER = "dcp.load"


def load(p: Path, target: str, layout: Layout) -> list[Verdict]:
    if layout.form != "dcp":
        return []
    v = LoaderCall(LOADER, f"dcp.load(state_dict, checkpoint_id={str(p)!r})", target)
    meta = p / ".metadata"
    if not meta.is_file():
        message = f"global metadata read failed: [Errno 2] No such file or directory: '{meta}'"
        fix = "Copy .metadata again from the source; it cannot be rebuilt."
        return [v.fails((".metadata",), "CheckpointException", message, fix, meant=True)]
    from ..readers.dcp.folder import read_metadata

    try:
        files = sorted({s.relative_path for s in read_metadata(p).storage_data.values()})
    except (CkptExplorerError, OSError, AttributeError) as e:
        return [v.fails((".metadata",), "", f".metadata unreadable: {e}", meant=True)]
    reads = (".metadata", *files)
    missing = [f for f in files if not (p / f).is_file()]
    if missing:
        message = f"No such file or directory: '{p / missing[0]}'"
        return [v.fails(reads, "CheckpointException", message, "Copy it again.", meant=True)]
    note = "keys and shapes are checked against the state_dict you pass"
    return [v.loads(reads, meant=True, notes=(note,))]
