"""DeepSpeed ZeRO 1/2/3 folders -> fp32 parameters, rebuilt without importing deepspeed.

Every parameter is located as byte ranges of the per-rank fp32 partitions in the optimizer
files, so it is copied from the files (or read as one parameter when a cast is asked for):
memory stays near one parameter, never the whole model.

- ZeRO-1/2: per param group, the ranks' ``single_partition_of_fp32_groups[g]`` concatenated in
  dp-rank order form the group's flat vector (the saved partitions leave out the trailing group
  padding); the group's parameters follow in ``param_shapes[g]`` order, each followed by its
  ``param_alignment_paddings[g][i]``.
- ZeRO-3: each rank's ``fp32_flat_groups`` (groups concatenated) holds, for every parameter in
  ``param_shapes`` order, its rank's ``ceil(numel / world)`` slice; the last rank's slice is
  padded, so only the first ``numel`` elements of the concatenated slices count.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from ..errors import CkptExplorerError
from ..io.location import Location
from ..io.safe_pickle import OpaqueObject
from ..types import TensorRecord
from ..view import CheckpointView
from .plan_types import Piece

OPTIM = re.compile(r"(?:^|/)(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
MODEL = re.compile(r"(?:^|/)(?:zero_pp_rank_(\d+)_)?mp_rank_(\d+)_model_states\.pt$")


@dataclass(frozen=True)
class Segment:
    """``numel`` elements of 4-byte fp32 at ``offset`` of ``file``."""

    file: str | Location
    offset: int
    numel: int


@dataclass(frozen=True)
class ZeroParam:
    name: str
    shape: tuple[int, ...]
    pieces: tuple[Piece, ...]


def _value(obj: Any) -> Any:
    if isinstance(obj, OpaqueObject) and obj.args:
        return obj.args[0]
    return obj


def _slice(segments: list[Segment], start: int, count: int, itemsize: int = 4) -> list[Piece]:
    """Byte ranges of elements ``[start, start + count)`` of the concatenated segments."""
    pieces: list[Piece] = []
    pos = 0
    for seg in segments:
        if count <= 0:
            break
        if start < pos + seg.numel:
            lo = max(start, pos) - pos
            n = min(seg.numel - lo, count)
            pieces.append(Piece(seg.file, seg.offset + lo * itemsize, n * itemsize))
            start += n
            count -= n
        pos += seg.numel
    if count > 0:
        raise CkptExplorerError(
            segments[0].file if segments else None,
            f"{count} more fp32 elements in the ZeRO partitions",
            "the partitions end first",
            "The optimizer files do not match param_shapes (wrong world size or a partial copy).",
        )
    return pieces


def _merge(pieces: list[Piece]) -> tuple[Piece, ...]:
    out: list[Piece] = []
    for p in pieces:
        if out and out[-1].file == p.file and out[-1].offset + out[-1].nbytes == p.offset:
            out[-1] = Piece(p.file, out[-1].offset, out[-1].nbytes + p.nbytes)
        elif p.nbytes:
            out.append(p)
    return tuple(out)


def _flat_records(view: CheckpointView, key: str) -> list[TensorRecord]:
    prefix = f"optimizer_state_dict.{key}."
    recs = [r for r in view.tensors if r.name.startswith(prefix)]
    recs.sort(key=lambda r: int(r.name[len(prefix) :].split(".")[0]))
    for r in recs:
        if r.dtype != "float32" or len(r.shape) != 1 or r.offset is None:
            raise CkptExplorerError(
                view.path, f"1-D float32 {key} partitions", f"{r.name}: {r.dtype} {r.shape}"
            )
    return recs


def _segments(view: CheckpointView, root: Location, recs: list[TensorRecord]) -> list[Segment]:
    from .fastpath import record_pieces

    out = []
    for r in recs:
        pieces = record_pieces(root, r)
        if pieces is None:
            raise CkptExplorerError(
                view.path, f"{r.name} stored as one dense block", "a strided view"
            )
        out.append(Segment(pieces[0].file, pieces[0].offset, r.numel))
    return out


def zero_parameters(
    ds: CheckpointView,
) -> tuple[list[ZeroParam], list[TensorRecord], Location, list[str], dict[str, str]]:
    """(fp32 parameters, module tensors to keep as saved, the model-states file they are
    in, notes, shared aliases name -> the parameter it shares)."""
    optim_parts = sorted(
        (
            (int(m.group(2)), int(m.group(3)), name)
            for name in ds.parts
            if (m := OPTIM.search(name))
        ),
    )
    model_parts = sorted(
        (int(m.group(1) or 0), int(m.group(2)), name)
        for name in ds.parts
        if (m := MODEL.search(name))
    )
    if not model_parts:
        raise CkptExplorerError(ds.path, "a DeepSpeed model_states file", "none")
    if any(mp != 0 for _, mp, _ in optim_parts + model_parts):
        raise CkptExplorerError(
            ds.path,
            "model parallel size 1 (mp_rank_00 only)",
            "several mp ranks",
            "Tensor-parallel DeepSpeed checkpoints are not rebuilt by ckpt_explorer.",
        )
    model = ds.parts[model_parts[0][2]]
    shapes = model.values.get("param_shapes")
    buffer_names = list(model.values.get("buffer_names") or [])
    shared = {str(k): str(v) for k, v in (model.values.get("shared_params") or {}).items()}
    frozen = model.values.get("frozen_param_shapes") or {}
    notes: list[str] = []
    module = {
        r.name.removeprefix("module."): r for r in model.tensors if r.name.startswith("module.")
    }
    buffers = [replace(module[n], name=n) for n in buffer_names if n in module]
    if not optim_parts:  # ZeRO-0: the module holds the weights
        notes.append("ZeRO stage 0: weights taken from the module as saved")
        kept = [replace(r, name=n) for n, r in module.items()]
        return [], kept, model.path, notes, shared
    if frozen:
        raise CkptExplorerError(
            ds.path, "no frozen parameters", f"{len(frozen)} frozen", "Not supported yet."
        )
    if not isinstance(shapes, list):
        raise CkptExplorerError(ds.path, "param_shapes in the model states", repr(shapes)[:60])
    ranks = [ds.parts[name] for _, _, name in optim_parts]
    world = len(ranks)
    stage = _value(ranks[0].values.get("optimizer_state_dict.zero_stage"))
    params: list[ZeroParam] = []
    if stage in (1, 2):
        pads = ranks[0].values.get("optimizer_state_dict.param_alignment_paddings")
        per_rank = [_flat_records(v, "single_partition_of_fp32_groups") for v in ranks]
        for g, group in enumerate(shapes):
            segs = [
                s
                for v, recs in zip(ranks, per_rank, strict=True)
                for s in _segments(v, v.path, [recs[g]])
            ]
            offset = 0
            for i, (name, shape) in enumerate(group.items()):
                n = math.prod(shape)
                params.append(ZeroParam(str(name), tuple(shape), _merge(_slice(segs, offset, n))))
                offset += n + (int(pads[g][i]) if pads else 0)
    elif stage == 3:
        per_rank_segs = [_segments(v, v.path, _flat_records(v, "fp32_flat_groups")) for v in ranks]
        offsets = [0] * world
        for group in shapes:
            for name, shape in group.items():
                n = math.prod(shape)
                part = math.ceil(n / world)
                pieces: list[Piece] = []
                left = n
                for r in range(world):
                    take = min(part, left)
                    if take > 0:
                        pieces += _slice(per_rank_segs[r], offsets[r], take)
                    left -= take
                    offsets[r] += part
                params.append(ZeroParam(str(name), tuple(shape), _merge(pieces)))
    else:
        raise CkptExplorerError(ds.path, "ZeRO stage 1, 2 or 3", f"stage {stage!r}")
    notes.append(f"ZeRO-{stage}, {world} data-parallel rank(s): fp32 weights from the optimizer")
    return params, buffers, model.path, notes, shared
