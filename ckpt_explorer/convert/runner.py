"""``run_conversion``: follow a plan with progress events and cancellation, verify, install."""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..contracts import Cancel, Meter, Progress, ProgressFn, is_cancelled
from ..errors import CkptExplorerError
from ..io.torchrun import Nodes
from .atomic import clean_stale, discard, install, make_parents, make_temp, remove_made
from .flush import BackgroundSync
from .plan_types import ConversionPlan, PlannedFile
from .targets import target, write_file
from .verify import verify_output
from .writers import (
    ConversionCancelled,
    colossalai_optimizer_index,
    fsync_path,
    hf_index,
    write_json,
)

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class ConversionResult:
    """The outcome: ``verified`` is True when every output tensor equals its source.

    Attributes:
        destination: where the output now is (it is not installed when not verified).
        files: output files relative to the destination folder (or the file's own name).
        bytes: tensor bytes written. seconds: writing time (into the page cache);
            verify_seconds: verification, while the output is flushed to disk (fsync).
        mismatches: what verification found (empty when verified).
        nproc: processes that wrote the output.
        left_out: what the source holds and the output does not (``plan.dropped``).
        notes: facts verification accepted (e.g. a tied weight the output holds twice).
    """

    verified: bool
    destination: str
    files: list[str]
    bytes: int
    seconds: float
    verify_seconds: float
    mismatches: list[str] = field(default_factory=list)
    nproc: int = 1
    fast_path_bytes: int = 0
    left_out: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def to_frame(self) -> pd.DataFrame:
        """One row per output file, then one per mismatch, note and left-out item."""
        import pandas as pd

        rows = [{"kind": "file", "item": f} for f in self.files]
        rows += [{"kind": "mismatch", "item": m} for m in self.mismatches]
        rows += [{"kind": "note", "item": n} for n in self.notes]
        rows += [{"kind": "left_out", "item": d} for d in self.left_out]
        return pd.DataFrame(rows, columns=["kind", "item"])


def write_files(
    plan: ConversionPlan,
    root: Path,
    files: Sequence[PlannedFile],
    meter: Meter | None = None,
    cancel: Cancel | None = None,
    sync: bool = True,
) -> None:
    """Write ``files`` of the plan under ``root`` (the output folder or the temp folder).

    ``meter`` counts the bytes written (its item: the file being written); ``sync=False``
    leaves fsyncing safetensors files to the caller. Each file is written by its writer
    (:data:`~ckpt_explorer.convert.targets.WRITERS`).
    """
    for pf in files:
        if meter is not None:
            meter.start(pf.name)
        tick = meter.advance if meter is not None else None
        if is_cancelled(cancel):
            raise ConversionCancelled(plan.destination, "the job to finish", "a cancel request")
        write_file(root, pf, tick, cancel, sync)


def write_extras(plan: ConversionPlan, root: Path) -> None:
    """The index and the side files, copied or made (rank 0's part of a distributed job)."""
    if plan.index is not None:
        name, kind = plan.index
        if kind == "hf":
            doc = hf_index(plan.files)
        else:
            group = next(f.name for f in plan.files if f.layout == "param_groups")
            doc = colossalai_optimizer_index(plan.files, group)
        write_json(root / name, doc)
    for src, name in plan.copies:
        local = src.local_path()
        if local is not None:
            shutil.copyfile(local, root / name)
        else:  # a remote side file (config.json): its bytes through the store
            (root / name).write_bytes(src.read_bytes())
        fsync_path(root / name)
    for name, doc in plan.written:
        write_json(root / name, doc)


def output_root(plan: ConversionPlan, tmp: Path) -> tuple[Path, Path]:
    """(folder the writers write into, path that is opened for verification)."""
    if plan.output_is_dir:
        return tmp, tmp
    return tmp, tmp / plan.destination.name


def run_conversion(
    plan: ConversionPlan,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    nproc: int = 1,
    nodes: Nodes | None = None,
    verify: bool = True,
) -> ConversionResult:
    """Carry out ``plan``: write into a temp folder, verify, then move into place.

    Args:
        plan: from :func:`plan_conversion`.
        progress: called with :class:`~ckpt_explorer.contracts.Progress` events as bytes
            are written (stage ``"write"``, the file being written), then once for
            ``"verify"``; a distributed job relays its ranks' events.
        cancel: set it to stop the job; the temp folder is removed and
            :class:`ConversionCancelled` raised; the destination is untouched.
        nproc: >1 runs the job under ``torch.distributed.run`` with that many processes.
        nodes: run that job over several nodes sharing a filesystem
            (:class:`~ckpt_explorer.io.torchrun.Nodes`; each node calls this with its rank).
        verify: compare the output with the source (on by default; an unverified result is
            installed only when ``verify`` is False).

    Returns:
        ConversionResult; when verification fails, ``verified`` is False and nothing was
        installed at the destination.
    """
    made = make_parents(plan.destination)  # removed again unless the output is installed
    try:
        result = _run(plan, progress, cancel, nproc, nodes, verify)
    except BaseException:
        remove_made(made)
        raise
    if not Path(result.destination).exists():
        remove_made(made)
    return result


def _run(
    plan: ConversionPlan,
    progress: ProgressFn | None,
    cancel: Cancel | None,
    nproc: int,
    nodes: Nodes | None,
    verify: bool,
) -> ConversionResult:
    total = plan.total_bytes
    spec = target(plan.target)
    if (nproc > 1 or nodes is not None) and not spec.torchrun:
        raise CkptExplorerError(
            plan.destination,
            f"one process for --to {plan.target}",
            f"--nproc {nproc}" + (" over several nodes" if nodes is not None else ""),
            "Drop --nproc / the node options: this target is written by one process.",
        )
    if nproc > 1 or nodes is not None:
        if progress is not None:
            progress(Progress("launch", 0, total, message=f"{nproc} processes"))
        from .launcher import launch  # torchrun machinery, only for nproc > 1

        doc = launch(plan, nproc, nodes=nodes, progress=progress, cancel=cancel)
        result = ConversionResult(**doc)
        if progress is not None:
            progress(Progress("verify", total, total, eta_s=0.0))
        result.left_out = list(plan.dropped)
        return result
    dst = plan.destination
    clean_stale(dst)
    tmp = make_temp(dst)
    try:
        root, opened = output_root(plan, tmp)
        meter = Meter(progress, "write", total)
        t0 = time.perf_counter()
        write_files(plan, root, plan.files, meter, cancel, sync=False)
        write_extras(plan, root)
        seconds = time.perf_counter() - t0
        meter.stage, meter.item = "verify", ""
        meter.emit(force=True, message="(verifying)")
        t1 = time.perf_counter()
        # the output goes to disk while verification reads it (and the source) from the cache
        flush = BackgroundSync(tmp)
        try:
            check = spec.verify or verify_output
            mismatches = check(plan, opened) if verify else []
        finally:
            flush.join()
        verify_seconds = time.perf_counter() - t1
        if is_cancelled(cancel):
            raise ConversionCancelled(dst, "the job to finish", "a cancel request")
        if mismatches:
            discard(tmp)
        else:
            install(tmp, dst, plan.output_is_dir, bool(plan.options.get("overwrite")))
    except BaseException:
        discard(tmp)
        raise
    return ConversionResult(
        verified=not mismatches and verify,
        destination=str(dst),
        files=plan.output_files(),
        bytes=plan.total_bytes,
        seconds=seconds,
        verify_seconds=verify_seconds,
        mismatches=mismatches,
        fast_path_bytes=plan.fast_bytes,
        left_out=list(plan.dropped),
    )
