"""Plan a repair (which builder, or a refusal) and run it: write to a temp file beside the
destination, fsync, rename into place, then verify by listing the folder again."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import CkptExplorerError
from ..loadable import loader_table
from ..loadable.damaged import recognise
from ..loadable.files import Listing
from .indexes import colossal_model, colossal_optimizer, hf_model
from .latest import deepspeed_latest
from .plan import RepairPlan
from .shards import Refused

BUILDERS = {
    "hf-model": hf_model,
    "colossalai-model": colossal_model,
    "colossalai-optimizer": colossal_optimizer,
    "deepspeed": deepspeed_latest,
}


# A frozen record's field list: alike in shape with other records only.
@dataclass(frozen=True)
class RepairResult:
    """The file written and what listing the folder again showed."""

    path: Path
    verified: bool
    checks: tuple[str, ...]
    seconds: float


def plan_repair(path: str | Path) -> RepairPlan:
    """What ``run_repair`` would write into ``path``; refused (``plan.refused``) when the
    folder is not damaged or its answer is not unique.

    Raises:
        CkptExplorerError: ``path`` is not a folder.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise CkptExplorerError(
            folder,
            "a checkpoint folder",
            "no folder at that path",
            "repair works on a folder whose index or latest file is gone.",
        )
    listing = Listing.of(folder)
    layout = recognise(folder, listing)
    if layout is None:
        return RepairPlan(
            folder,
            "nothing damaged",
            refused="no lost index, metadata or "
            "latest file recognised here (see `ckpt-explorer inspect`)",
        )
    builder = BUILDERS.get(layout.form)
    if builder is None:
        return RepairPlan(
            folder,
            layout.damaged,
            refused="it cannot be rebuilt from the other "
            "files (.metadata maps every chunk); copy it again from the source",
        )
    try:
        return builder(folder, listing)
    except Refused as e:
        return RepairPlan(folder, layout.damaged, refused=str(e))


def run_repair(plan: RepairPlan) -> RepairResult:
    """Write ``plan.name`` atomically (temp file + fsync + rename), then verify.

    Raises:
        CkptExplorerError: the plan was refused, or the file appeared meanwhile.
    """
    if plan.refused:
        raise CkptExplorerError(plan.folder, "a repairable folder", plan.refused)
    dest = plan.folder / plan.name
    if dest.exists():
        raise CkptExplorerError(
            dest,
            "no file at the repair's destination",
            "one is there now",
            "Nothing was written; inspect the folder again.",
        )
    start = time.perf_counter()
    tmp = plan.folder / f".{plan.name}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, plan.content)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, dest)  # fails if dest appeared meanwhile: never overwrite
    finally:
        tmp.unlink()
    dfd = os.open(plan.folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    checks = _verify(plan)
    ok = all(c.startswith("ok") for c in checks)
    return RepairResult(dest, ok, tuple(checks), time.perf_counter() - start)


def _verify(plan: RepairPlan) -> list[str]:
    from ..api import open_checkpoint

    out = []
    try:
        view = open_checkpoint(plan.folder)
    except CkptExplorerError as e:
        return [f"FAILED: the folder still does not open: {e.one_line()}"]
    if plan.name == "latest":
        out.append(f"ok: opens as {view.family} ({view.detection.detail or view.kind})")
    elif view.optimizer is not None:
        ids = {str(i) for i in view.optimizer.state_ids}
        same = ids == set(plan.expect)
        out.append(
            ("ok" if same else "FAILED") + f": {len(ids)} param id(s) listed, "
            f"{len(plan.expect)} in the index"
        )
    else:
        listed = {r.name: r.file for r in view.tensors}
        same = all(listed.get(k) == v for k, v in plan.expect.items()) and len(listed) >= len(
            plan.expect
        )
        out.append(
            ("ok" if same else "FAILED") + f": {len(listed)} tensor(s) listed from "
            f"{len(set(plan.expect.values()))} shard(s) as the index names them"
        )
    table = loader_table(plan.folder)
    for v in table.verdicts:
        if v.meant:
            said = {"loads": "ok", "cannot_tell": "cannot tell"}.get(v.outcome, "FAILED")
            out.append(f"{said}: {v.label} {v.outcome}")
    return out
