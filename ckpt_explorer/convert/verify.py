"""Verification: reopen the output as a user would and compare it to the source bit for bit.

Every planned tensor must be in the output with its dtype and shape, and its bytes must equal
the source's. The output is listed by the package's own readers (its header parsed afresh, not
taken from the writer); where both sides are plain byte ranges (a copied tensor written to a
safetensors or dense torch file) they are compared block by block without a tensor library,
otherwise the output tensor is loaded and compared with the loaded (and cast) source values.
Plain values (``param_groups``, integer steps) must be equal, and an index must name exactly
the files written, each tensor in the file that holds it, with the right ``total_size``; a
side file the conversion made (a Megatron model's ``config.json``) must hold its document.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CkptExplorerError
from ..io.location import Location
from .bytecheck import MappedComparer, OpenFiles, RangeComparer
from .fastpath import add_pieces, record_pieces
from .plan_types import ConversionPlan, Piece, PlannedFile, PlannedTensor

if TYPE_CHECKING:
    from ..types import TensorRecord
    from ..view import CheckpointView

MAX_REPORTED = 50


def verify_output(
    plan: ConversionPlan, output: Path, files: Iterable[PlannedFile] | None = None
) -> list[str]:
    """Mismatches between the output at ``output`` and the plan's sources (empty: verified).

    ``files`` limits the tensor check to those files (a distributed rank checks its share).
    """
    from ..api import open_checkpoint

    mismatches: list[str] = []
    chosen = list(plan.files if files is None else files)
    if any(pf.layout == "state" for pf in chosen):
        return verify_state(chosen[0], output)
    try:
        view = open_checkpoint(output)
    except CkptExplorerError as e:
        return [f"the output does not open: {e}"]
    listed = {r.name: r for r in view.tensors}
    memo: dict[str, tuple[str | Location, str, int]] = {}
    is_dir = output.is_dir()
    with OpenFiles() as files_open, MappedComparer() as mapped:
        compare = RangeComparer(files_open)
        for pf in chosen:
            # copied tensors whose both sides are local byte ranges: compared in one stream
            # per file (left: the output's ranges, right: the sources'), tensor by tensor only
            # to name the ones that differ
            batch: list[tuple[PlannedTensor, tuple[Piece, ...]]] = []
            for t in pf.tensors:
                if len(mismatches) >= MAX_REPORTED:
                    return mismatches
                record = listed.get(t.name)
                unlike = t.unlike(record)
                if unlike is not None:
                    mismatches.append(unlike)
                    continue
                assert record is not None
                if is_dir and pf.named and record.file != pf.name:
                    mismatches.append(f"{t.name}: in {record.file}, planned for {pf.name}")
                written = _local_pieces(output, record, t, memo) if mapped.usable else None
                if written is not None:
                    batch.append((t, written))
                elif not _same_output(view, output, record, t, compare, memo):
                    mismatches.append(f"{t.name}: bytes differ from the source")
            if batch and not _batch_equal(mapped, batch):
                for t, written in batch:
                    assert t.pieces is not None
                    if not compare.equal(written, t.pieces):
                        mismatches.append(f"{t.name}: bytes differ from the source")
                        if len(mismatches) >= MAX_REPORTED:
                            return mismatches
            mismatches += _check_values(pf, view.values)
    if files is None:
        planned_names = {t.name for t in plan.tensors}
        extra = [n for n in listed if n not in planned_names]
        if extra:
            mismatches.append(f"{len(extra)} unplanned tensor(s) in the output, e.g. {extra[0]}")
        if plan.index is not None:
            mismatches += check_index(plan, output)
        mismatches += check_written(plan, output)
    return mismatches


def check_written(plan: ConversionPlan, output: Path) -> list[str]:
    """Each side file the conversion made (``plan.written``) holds its planned document."""
    problems: list[str] = []
    for name, doc in plan.written:
        try:
            got = json.loads((output / name).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            problems.append(f"{name}: unreadable ({e})")
            continue
        if got != doc:
            problems.append(f"{name}: differs from the planned document")
    return problems


def verify_state(pf: PlannedFile, output: Path) -> list[str]:
    """A whole-state file: ``torch.load(weights_only=True)`` gives back the planned object,
    the same containers and keys, each value equal, each tensor's bytes the source's."""
    import torch

    from .writers import state_tree

    try:
        got = torch.load(output, weights_only=True, mmap=True)
    except Exception as e:
        return [f"the output does not open with torch.load(weights_only=True): {e}"[:300]]
    leaves = {t.name: t for t in pf.tensors}
    want = state_tree(pf, lambda n: leaves.get(n, pf.values.get(n)))
    out: list[str] = []
    _compare(got, want, "", out)
    return out[:MAX_REPORTED]


def _compare(got: Any, want: Any, where: str, out: list[str]) -> None:
    import torch

    if len(out) >= MAX_REPORTED:
        return
    if isinstance(want, PlannedTensor):
        if not isinstance(got, torch.Tensor):
            out.append(f"{where}: {type(got).__name__} written, a tensor planned")
        elif str(got.dtype).removeprefix("torch.") != want.dtype or tuple(got.shape) != want.shape:
            out.append(f"{where}: {got.dtype} {list(got.shape)} written, {want.dtype} planned")
        elif not _same_bytes(got, want):
            out.append(f"{where}: bytes differ from the source")
    elif isinstance(want, dict):
        if not isinstance(got, dict) or list(got) != list(want):
            found = list(got)[:5] if isinstance(got, dict) else type(got).__name__
            out.append(f"{where or 'root'}: keys {found} written, {list(want)[:5]} planned")
            return
        for k in want:
            _compare(got[k], want[k], f"{where}.{k}" if where else str(k), out)
    elif isinstance(want, list | tuple):
        if type(got) is not type(want) or len(got) != len(want):
            out.append(f"{where}: {got!r:.80} written, a {type(want).__name__} planned")
            return
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _compare(g, w, f"{where}.{i}", out)
    elif type(got) is not type(want) or got != want:
        out.append(f"{where}: {got!r:.80} written, {want!r:.80} in the source")


def _local_pieces(
    output: Path,
    record: TensorRecord,
    t: PlannedTensor,
    memo: dict[str, tuple[str | Location, str, int]],
) -> tuple[Piece, ...] | None:
    """The output ranges of a copied tensor when it and its source are local byte ranges."""
    if not (t.fast and t.pieces is not None) or any(isinstance(p.file, Location) for p in t.pieces):
        return None
    written = record_pieces(output, record, memo)
    if written is None or any(isinstance(p.file, Location) for p in written):
        return None
    return written


def _batch_equal(
    mapped: MappedComparer, batch: list[tuple[PlannedTensor, tuple[Piece, ...]]]
) -> bool:
    """Whether every tensor of ``batch`` holds its source bytes: the output ranges and the
    source ranges, in the order of the output's bytes and each merged where they continue
    one another, compared as two streams."""
    left: list[Piece] = []
    right: list[Piece] = []
    for t, written in sorted(batch, key=lambda b: (str(b[1][0].file), b[1][0].offset)):
        assert t.pieces is not None
        if sum(p.nbytes for p in written) != sum(p.nbytes for p in t.pieces):
            return False  # each tensor's own lengths must agree, not only the totals
        add_pieces(left, written)
        add_pieces(right, t.pieces)
    return mapped.equal(left, right)


def _same_output(
    view: CheckpointView,
    output: Path,
    record: TensorRecord,
    t: PlannedTensor,
    compare: RangeComparer,
    memo: dict[str, tuple[str | Location, str, int]],
) -> bool:
    """The output tensor ``record`` holds exactly ``t``'s source bytes."""
    if t.fast and t.pieces is not None:
        written = record_pieces(output, record, memo)
        if written is not None:
            return compare.equal(written, t.pieces)
    return _same_bytes(view.load(t.name), t)


def _same_bytes(out: Any, t: PlannedTensor) -> bool:
    import torch

    from .fastpath import piece_bytes
    from .writers import _load, tensor_bytes

    got = tensor_bytes(out)
    if got.numel() != t.nbytes:
        return False
    if t.fast and t.pieces is not None:
        pos = 0
        for p in t.pieces:
            if not torch.equal(got[pos : pos + p.nbytes], piece_bytes(p)):
                return False
            pos += p.nbytes
        return True
    return bool(torch.equal(got, tensor_bytes(_load(t))))


def _check_values(pf: PlannedFile, values: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, want in pf.values.items():
        if key.startswith("__") or not pf.named:
            continue
        got = values.get("param_groups" if pf.layout == "param_groups" else key)
        if got != want:
            out.append(f"{key}: {got!r:.80} written, {want!r:.80} in the source")
    return out


def check_index(plan: ConversionPlan, output: Path) -> list[str]:
    """The index names exactly the written files, each tensor where it is, and its total."""
    assert plan.index is not None
    name, kind = plan.index
    path = output / name
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return [f"{name}: unreadable ({e})"]
    wm: dict[str, str] = doc.get("weight_map", {})
    meta: dict[str, Any] = doc.get("metadata", {})
    problems: list[str] = []
    data_files = [f for f in plan.files if f.layout != "param_groups"]
    for f in data_files:
        if not (output / f.name).is_file():
            problems.append(f"{name}: shard {f.name} is missing")
    if kind == "hf":
        want = {t.name: f.name for f in data_files for t in f.tensors}
        total = sum(f.nbytes for f in data_files)
        if not (isinstance(meta.get("total_size"), int) and meta["total_size"] == total):
            problems.append(f"{name}: total_size {meta.get('total_size')!r}, expected {total}")
    else:
        want = {}
        for f in data_files:
            for n in f.values.get("__order__", []):
                want.setdefault(n.split(".", 2)[1], f.name)
        groups = next(f.name for f in plan.files if f.layout == "param_groups")
        if meta.get("param_groups") != groups:
            problems.append(f"{name}: param_groups {meta.get('param_groups')!r}, expected {groups}")
    if wm != want:
        diff = [k for k in set(wm) | set(want) if wm.get(k) != want.get(k)]
        problems.append(f"{name}: weight_map differs for {len(diff)} name(s), e.g. {diff[0]!r}")
    return problems
