"""``diff_checkpoints``: the public entry point of the diff engine."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..api import as_view
from ..contracts import Cancel, ProgressFn
from ..errors import CkptExplorerError
from ..io.location import Location
from ..io.torchrun import Nodes
from ..view import CheckpointView
from .engine import DEFAULT_CHUNK_BYTES, Engine, plan_pairs
from .export_side import attach_budgets, export_checks, export_sides
from .hf_side import hf_sides
from .launcher import launch
from .report import DiffResult
from .rows import TensorDiff
from .values import compare_values


def diff_checkpoints(
    a: str | Path | Location | CheckpointView,
    b: str | Path | Location | CheckpointView,
    *,
    atol: float = 0.0,
    rtol: float = 0.0,
    rename: dict[str, str] | None = None,
    device: str = "cpu",
    nproc: int = 1,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    on_row: Callable[[TensorDiff], Any] | None = None,
    nodes: Nodes | None = None,
) -> DiffResult:
    """Compare two checkpoints of any known families, tensor by tensor, and their values.

    Args:
        a, b: paths (any family :func:`open_checkpoint` knows) or open views. A Megatron
            training state against an HF model is compared as the HF model it converts to
            (:mod:`.hf_side`); a GGUF export against an HF model is compared under the HF
            names, each row with what its storage type should cost and a verdict
            (:mod:`.export_side`).
        atol, rtol: an element is within tolerance when ``|b - a| <= atol + rtol * |a|``.
        rename: ``{OLD: NEW}`` substitutions applied to A's names when pairing.
        device: ``"cpu"``, ``"cuda"`` or ``"auto"`` (CUDA when available).
        nproc: >1 runs a real distributed job (``torch.distributed.run``, gloo on CPU) that
            splits the pairs by bytes across processes; ``a`` and ``b`` must then be paths
            (a view is reopened from its path).
        nodes: run that job over several nodes (:class:`~ckpt_explorer.io.torchrun.Nodes`:
            every node calls this with its own node rank; ``nproc`` processes on each).
        progress: called with :class:`~ckpt_explorer.contracts.Progress` events (stage
            ``"compare"``, bytes of both sides, the tensor being compared); a distributed job
            relays its ranks' events.
        cancel: a ``threading.Event`` (or anything with ``is_set()``); set = stop.
        chunk_bytes: bytes per chunk of a tensor (large tensors are walked in chunks).
        on_row: called with each row as soon as it is computed (in-process runs only), so a
            caller can show partial results while the diff streams.

    Returns:
        A :class:`DiffResult`; when cancelled, ``result.cancelled`` is True and the pairs not
        reached are ``not_compared``.

    Example:
        >>> r = diff_checkpoints("run/step-6000", "run/step-6010")   # doctest: +SKIP
        >>> r.summary()["changed"], r.to_frame().head()              # doctest: +SKIP
    """
    if nproc < 1:
        raise CkptExplorerError(None, "nproc >= 1", str(nproc))
    if nproc > 1 or nodes is not None:
        return launch(
            a if not isinstance(a, CheckpointView) else a.path,
            b if not isinstance(b, CheckpointView) else b.path,
            nproc=nproc,
            atol=atol,
            rtol=rtol,
            rename=rename,
            device=device,
            chunk_bytes=chunk_bytes,
            progress=progress,
            cancel=cancel,
            nodes=nodes,
        )
    t0 = time.perf_counter()
    view_a, view_b = export_sides(*hf_sides(as_view(a), as_view(b)))
    engine = Engine(
        view_a,
        view_b,
        atol=atol,
        rtol=rtol,
        device=device,
        chunk_bytes=chunk_bytes,
        progress=progress,
        cancel=cancel,
        on_row=on_row,
    )
    rows = engine.run(plan_pairs(view_a, view_b, rename))
    export = attach_budgets(rows, view_a, view_b) if not engine.cancelled else None
    values = compare_values(view_a, view_b, rename) + export_checks(view_a, view_b)
    opts = options(view_a.path, view_b.path, atol, rtol, str(engine.device), 1, chunk_bytes, t0)
    if export is not None:
        opts["export"] = export  # which side is the export (the other is its source)
    return DiffResult(rows, values, engine.cancelled, opts)


def options(
    a: Path | Location,
    b: Path | Location,
    atol: float,
    rtol: float,
    device: str,
    nproc: int,
    chunk_bytes: int,
    t0: float,
) -> dict[str, Any]:
    return {
        "a": str(a),
        "b": str(b),
        "atol": atol,
        "rtol": rtol,
        "device": device,
        "nproc": nproc,
        "chunk_bytes": chunk_bytes,
        "seconds": round(time.perf_counter() - t0, 6),
    }
