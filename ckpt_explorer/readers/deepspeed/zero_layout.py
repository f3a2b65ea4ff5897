"""DeepSpeed ZeRO flat partitions -> where each parameter lies in them (deepspeed not imported).

Parameter ids: id ``k`` is the k-th entry of the model states' ``param_shapes`` read group by
group (the trainable parameters DeepSpeed flattened, in its order; names recorded by DeepSpeed).
That is torch's own numbering of the client optimizer when every parameter in its groups is
trainable (frozen ones are left out of ``param_shapes``).

Layouts (world = number of optimizer files, one per data-parallel rank; model parallel 1):

- ZeRO-1/2: per param group ``g``, the ranks' partitions concatenated in rank order form the
  group's flat vector; the group's parameters follow in ``param_shapes[g]`` order, each followed
  by its ``param_alignment_paddings[g][i]``. A rank's fp32 partition
  (``single_partition_of_fp32_groups.<g>``) and its optimizer states
  (``base_optimizer_state.state.<g>.<name>``) cover the same range; the states keep the trailing
  group padding, the fp32 partition drops it.
- ZeRO-3: each rank's sub-group flats (``fp32_flat_groups.<j>``, states
  ``optimizer_state_dict.state.<j>.<name>``) concatenated hold, for every parameter in
  ``param_shapes`` order, its rank's ``ceil(numel / world)`` slice (the last one padded).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...io.safe_pickle import OpaqueObject
from ...types import TensorRecord
from ...view import CheckpointView

if TYPE_CHECKING:
    import torch

FP32_KEY = {1: "single_partition_of_fp32_groups", 2: "single_partition_of_fp32_groups"}
STATE_PREFIX = {
    1: "optimizer_state_dict.base_optimizer_state.",
    2: "optimizer_state_dict.base_optimizer_state.",
    3: "optimizer_state_dict.optimizer_state_dict.",
}


class LayoutError(ValueError):
    """The files do not follow a ZeRO layout this module knows (the message says what)."""


@dataclass(frozen=True)
class Piece:
    """``count`` elements from element ``start`` of flat source ``source`` of rank ``rank``
    (the group for ZeRO-1/2, the sub-group for ZeRO-3)."""

    rank: int
    source: int
    start: int
    count: int


# A frozen record's field list: alike in shape with other records (site_pth, repair) only.
@dataclass(frozen=True)
class ZeroSlot:
    """One trainable parameter: its id, recorded name, shape, param group and pieces."""

    pid: int
    name: str
    shape: tuple[int, ...]
    group: int
    pieces: tuple[Piece, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class ZeroLayout:
    """Where every trainable parameter lies in the flat partitions of ``ranks``.

    Attributes:
        stage: ZeRO stage (1, 2 or 3).
        ranks: the optimizer-states views in data-parallel rank order.
        slots: the parameters in id order.
        group_sources: per param group, the flat source ids (state ids of the file) it uses.
        groups: the file's param_groups (hyperparameters; ``params`` = flat source ids).
        by_name: per rank, its records by name.
    """

    stage: int
    ranks: tuple[CheckpointView, ...]
    slots: tuple[ZeroSlot, ...]
    group_sources: tuple[tuple[int, ...], ...]
    groups: tuple[dict[str, Any], ...]
    by_name: tuple[dict[str, TensorRecord], ...]

    def fp32_name(self, source: int) -> str:
        key = FP32_KEY.get(self.stage, "fp32_flat_groups")
        return f"optimizer_state_dict.{key}.{source}"

    def state_name(self, source: int, state: str) -> str:
        return f"{STATE_PREFIX[self.stage]}state.{source}.{state}"

    def state_names(self, group: int) -> tuple[str, ...]:
        """Names of the optimizer states of ``group`` (``exp_avg``, ``step``, ...)."""
        if not self.group_sources[group]:
            return ()
        prefix = f"{STATE_PREFIX[self.stage]}state.{self.group_sources[group][0]}."
        names = [r.name[len(prefix) :] for r in self.ranks[0].tensors if r.name.startswith(prefix)]
        names += [k[len(prefix) :] for k in self.ranks[0].values if k.startswith(prefix)]
        return tuple(n for n in dict.fromkeys(names) if "." not in n)

    def pieces_of(
        self, slot: ZeroSlot, name: Callable[[int], str]
    ) -> list[tuple[CheckpointView, TensorRecord, int, int]] | None:
        """(rank view, record, start, count) per piece of ``slot`` in the sources named by
        ``name(source)``; None when a source is missing or too short."""
        out = []
        for p in slot.pieces:
            view = self.ranks[p.rank]
            rec = self.by_name[p.rank].get(name(p.source))
            if rec is None or len(rec.shape) != 1 or rec.shape[0] < p.start + p.count:
                return None
            out.append((view, rec, p.start, p.count))
        return out


def enum_value(obj: Any) -> Any:
    """The value of a pickled enum member kept as an inert object (``ZeroStageEnum(3)``)."""
    if isinstance(obj, OpaqueObject) and obj.args:
        return obj.args[0]
    return obj


def _source_sizes(view: CheckpointView, prefix: str) -> dict[int, int]:
    sizes = {}
    for r in view.tensors:
        if r.name.startswith(prefix) and r.name[len(prefix) :].isdigit() and len(r.shape) == 1:
            sizes[int(r.name[len(prefix) :])] = r.shape[0]
    return sizes


def _split(sizes: list[tuple[int, int]], start: int, count: int, rank: int) -> list[Piece]:
    """Pieces of elements ``[start, start + count)`` of the concatenated ``(source, size)``."""
    out: list[Piece] = []
    pos = 0
    for source, size in sizes:
        if count <= 0:
            break
        if start < pos + size:
            lo = max(start, pos) - pos
            n = min(size - lo, count)
            out.append(Piece(rank, source, lo, n))
            start += n
            count -= n
        pos += size
    if count > 0:
        raise LayoutError(f"rank {rank}'s flat partitions end {count} element(s) early")
    return out


def _groups(view: CheckpointView, stage: int) -> list[dict[str, Any]]:
    groups = view.values.get(STATE_PREFIX[stage] + "param_groups")
    if not isinstance(groups, list | tuple) or not all(isinstance(g, dict) for g in groups):
        raise LayoutError("no param_groups list in the optimizer states")
    return [dict(g) for g in groups]


def _sources(group: dict[str, Any]) -> tuple[int, ...]:
    params = group.get("params")
    if not isinstance(params, list | tuple) or not all(
        isinstance(p, int) and not isinstance(p, bool) for p in params
    ):
        raise LayoutError("a param group without an integer params list")
    return tuple(params)


def zero_layout(model_states: CheckpointView, ranks: list[CheckpointView]) -> ZeroLayout:
    """The layout of the ZeRO-1/2/3 partitions in ``ranks`` (optimizer files, rank order).

    Raises:
        LayoutError: the files do not fit a known layout (message says what does not fit).
    """
    shapes = model_states.values.get("param_shapes")
    if not isinstance(shapes, list | tuple) or not all(isinstance(g, dict) for g in shapes):
        raise LayoutError("no param_shapes list in the model states")
    if not ranks:
        raise LayoutError("no optimizer-states files")
    stage = enum_value(ranks[0].values.get("optimizer_state_dict.zero_stage"))
    if stage not in (1, 2, 3):
        raise LayoutError(f"ZeRO stage {stage!r} (expected 1, 2 or 3)")
    groups = _groups(ranks[0], stage)
    if len(groups) != len(shapes):
        raise LayoutError(f"{len(groups)} param group(s) but param_shapes has {len(shapes)}")
    group_sources = tuple(_sources(g) for g in groups)
    world = len(ranks)
    slots: list[ZeroSlot] = []
    if stage in (1, 2):
        pads = ranks[0].values.get("optimizer_state_dict.param_alignment_paddings")
        fp32 = [_source_sizes(v, f"optimizer_state_dict.{FP32_KEY[stage]}.") for v in ranks]
        for g, group in enumerate(shapes):
            if len(group_sources[g]) != 1:
                raise LayoutError(f"group {g} has {len(group_sources[g])} flat partitions")
            src = group_sources[g][0]
            if any(src not in sizes for sizes in fp32):
                raise LayoutError(f"a rank lacks the fp32 partition of group {g}")
            # every rank's partition has rank 0's size; only the last one drops its padding
            part = fp32[0][src]
            offset = 0
            for i, (name, shape) in enumerate(group.items()):
                n = math.prod(shape)
                pieces = []
                start, left = offset, n
                while left > 0:
                    rank, lo = divmod(start, part) if world > 1 else (0, start)
                    take = min(left, part - lo) if world > 1 else left
                    pieces.append(Piece(rank, src, lo, take))
                    start += take
                    left -= take
                slots.append(ZeroSlot(len(slots), str(name), tuple(shape), g, tuple(pieces)))
                pad = pads[g][i] if isinstance(pads, list | tuple) else 0
                offset += n + int(pad)
    else:
        per_rank = [_source_sizes(v, "optimizer_state_dict.fp32_flat_groups.") for v in ranks]
        order = [s for sources in group_sources for s in sources]
        sizes = [[(s, sizes.get(s, 0)) for s in order] for sizes in per_rank]
        offsets = [0] * world
        for g, group in enumerate(shapes):
            for name, shape in group.items():
                n = math.prod(shape)
                part = math.ceil(n / world)
                pieces = []
                left = n
                for r in range(world):
                    take = min(part, left)
                    if take > 0:
                        pieces += _split(sizes[r], offsets[r], take, r)
                    left -= take
                    offsets[r] += part
                slots.append(ZeroSlot(len(slots), str(name), tuple(shape), g, tuple(pieces)))
    by_name = tuple({r.name: r for r in v.tensors} for v in ranks)
    return ZeroLayout(stage, tuple(ranks), tuple(slots), group_sources, tuple(groups), by_name)


def slice_read_values(
    pieces: list[tuple[CheckpointView, TensorRecord, int, int]],
    shape: tuple[int, ...],
    dtype: str | None = None,
) -> Callable[[], torch.Tensor]:
    """Load the pieces (each a slice of a 1-D record), join them, shape them, cast them."""

    def load() -> torch.Tensor:
        import torch

        chunks = []
        for _, rec, start, count in pieces:
            if rec.read_values is None:
                raise LayoutError(f"{rec.name} has no data to load")
            chunks.append(rec.read_values().reshape(-1).narrow(0, start, count))
        t = chunks[0] if len(chunks) == 1 else torch.cat(chunks)
        t = t.reshape(shape)
        return t if dtype is None else t.to(getattr(torch, dtype))

    return load


def byte_offset(rec: TensorRecord, start: int, itemsize: int) -> int | None:
    """Absolute offset of element ``start`` of a 1-D contiguous record, when it has one."""
    if rec.offset is None or len(rec.shape) != 1:
        return None
    return rec.offset + start * itemsize
