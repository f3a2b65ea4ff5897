"""Start a conversion as a torchrun job (the rank side is :mod:`.distributed`)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from ..contracts import Cancel, ProgressFn
from ..errors import CkptExplorerError
from ..io.torchrun import Nodes, run_torchrun
from .plan_types import ConversionPlan


def job_arguments(plan: ConversionPlan, result_path: Path) -> list[str]:
    """The rank-side command line that re-plans ``plan`` in every rank (a remote source is
    handed over in a file beside ``result_path``)."""
    from ..remote.handoff import argument

    o = plan.options
    source = argument(plan.source, result_path.parent, "source")
    args = [source, str(plan.destination), "--to", plan.target]
    args += ["--result", str(result_path)]
    if o.get("max_shard_size") is not None:
        args += ["--max-shard-size", str(o["max_shard_size"])]
    if o.get("dtype"):
        args += ["--dtype", str(o["dtype"])]
    if o.get("overwrite"):
        args.append("--overwrite")
    if o.get("model_only"):
        args.append("--model-only")
    return args


def launch(
    plan: ConversionPlan,
    nproc: int,
    timeout_s: float = 3600,
    nodes: Nodes | None = None,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
) -> dict[str, Any]:
    """Run ``plan`` in ``nproc`` processes (on each of ``nodes`` when given, each node calling
    this with its own node rank); the result rank 0 made (ConversionResult fields).

    ``progress`` receives this node's ranks' ``write`` events, summed, while they write;
    ``cancel`` terminates the job (:class:`~.writers.ConversionCancelled`; the destination
    is untouched and the job's temp folder removed).
    """
    from .atomic import clean_stale
    from .writers import ConversionCancelled

    with tempfile.TemporaryDirectory(prefix="ckpt-convert-") as td:
        result_path = Path(td) / "result.json"
        ended = run_torchrun(
            "ckpt_explorer.convert.distributed",
            job_arguments(plan, result_path),
            nproc,
            Path(td),
            cancel=cancel,
            timeout_s=timeout_s,
            nodes=nodes,
            progress=progress,
        )
        if ended.cancelled:
            clean_stale(plan.destination)  # the ranks are gone: their temp folder goes too
            raise ConversionCancelled(plan.destination, "the job to finish", "a cancel request")
        if not result_path.is_file():
            raise CkptExplorerError(
                plan.destination,
                f"a result from the {nproc}-process job",
                f"exit {ended.returncode}",
                "Its output ends with: " + ended.log_tail,
            )
        doc: dict[str, Any] = json.loads(result_path.read_text())
    return doc
