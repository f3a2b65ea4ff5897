"""Start a diff as a torchrun job (the rank side is :mod:`.distributed`)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ..contracts import Cancel, Progress, ProgressFn
from ..errors import CkptExplorerError
from ..io.location import Location
from ..io.torchrun import Nodes, run_torchrun
from .engine import DEFAULT_CHUNK_BYTES
from .report import DiffResult


def launch(
    a: str | Path | Location,
    b: str | Path | Location,
    *,
    nproc: int,
    atol: float = 0.0,
    rtol: float = 0.0,
    rename: dict[str, str] | None = None,
    device: str = "cpu",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    nodes: Nodes | None = None,
) -> DiffResult:
    """Run the diff in ``nproc`` processes (on each of ``nodes``, when given: every node runs
    this with its own node rank and reads the same report back) and read rank 0's report.

    The ranks' progress is relayed as they compare (this node's ranks, summed), and once
    more at the end; cancellation terminates the job and returns an empty result flagged as
    cancelled.
    """
    from .engine import resolve_device

    if device != "cpu":  # a clear error before starting processes (torch is not needed here)
        resolve_device(device)
    with tempfile.TemporaryDirectory(prefix="ckpt-diff-") as tmp:
        from ..remote.handoff import argument

        out = Path(tmp) / "result.json"
        args = [argument(a, Path(tmp), "a"), argument(b, Path(tmp), "b")]
        args += ["--out", str(out), "--atol", repr(float(atol))]
        args += ["--rtol", repr(float(rtol)), "--device", device]
        args += ["--chunk-bytes", str(chunk_bytes)]
        for old, new in (rename or {}).items():
            args += ["--rename", f"{old}={new}"]
        ended = run_torchrun(
            "ckpt_explorer.diff.distributed",
            args,
            nproc,
            Path(tmp),
            cancel=cancel,
            nodes=nodes,
            progress=progress,
        )
        if ended.cancelled:
            return DiffResult([], [], True, {"a": str(a), "b": str(b), "nproc": nproc})
        if ended.returncode != 0 or not out.is_file():
            raise CkptExplorerError(
                None,
                f"the {nproc}-process{' per node' if nodes else ''} diff job to finish",
                f"exit status {ended.returncode}: {ended.log_tail.strip().splitlines()[-1:] or ''}",
                "Run it by hand with torchrun to see the whole log.",
            )
        result = DiffResult.from_json(json.loads(out.read_text()))
    if progress is not None:
        total = int(result.summary()["bytes_compared"])
        progress(Progress("compare", total, total, "bytes", eta_s=0.0))
    return result
