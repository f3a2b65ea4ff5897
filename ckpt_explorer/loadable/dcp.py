"""``torch.distributed.checkpoint.load(state_dict, checkpoint_id=folder)``: the
``FileSystemReader`` opens ``<folder>/.metadata`` first (a failure on any rank comes back
wrapped in ``CheckpointException``), then the ``.distcp`` files it names."""

from __future__ import annotations

from pathlib import Path

from ..errors import CkptExplorerError
from .verdicts import Layout, Verdict

LOADER = "dcp.load"


def load(p: Path, target: str, layout: Layout) -> list[Verdict]:
    if layout.kind != "dcp":
        return []
    call = f"dcp.load(state_dict, checkpoint_id={str(p)!r})"
    meta = p / ".metadata"
    if not meta.is_file():
        return [
            Verdict(
                LOADER,
                call,
                target,
                "fails",
                (".metadata",),
                "CheckpointException",
                f"global metadata read failed: [Errno 2] No such file or directory: '{meta}'",
                "Copy .metadata again from the source; it cannot be rebuilt.",
                True,
            )
        ]
    from ..readers.dcp.folder import read_metadata

    try:
        files = sorted({s.relative_path for s in read_metadata(p).storage_data.values()})
    except (CkptExplorerError, OSError, AttributeError) as e:
        return [
            Verdict(
                LOADER,
                call,
                target,
                "fails",
                (".metadata",),
                "",
                f".metadata unreadable: {e}",
                "",
                True,
            )
        ]
    missing = [f for f in files if not (p / f).is_file()]
    if missing:
        return [
            Verdict(
                LOADER,
                call,
                target,
                "fails",
                (".metadata", *files),
                "CheckpointException",
                f"No such file or directory: '{p / missing[0]}'",
                "Copy it again.",
                True,
            )
        ]
    return [
        Verdict(
            LOADER,
            call,
            target,
            "loads",
            (".metadata", *files),
            meant=True,
            notes=("keys and shapes are checked against the state_dict you pass",),
        )
    ]
