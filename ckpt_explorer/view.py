"""CheckpointView: the one lazy view every reader returns and every consumer uses."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol

from .errors import CkptExplorerError
from .io.location import Location, PathLike, as_location
from .record_table import RecordTable, record_column
from .types import Detection, FileInfo, OptimizerInfo, Slot, StateMap, TensorRecord, Traits

if TYPE_CHECKING:
    import torch


class CheckpointView:
    """A checkpoint listed from headers, indexes and pickle structure; values load on demand.

    Attributes:
        path: what was opened (a :class:`~.io.location.Location`: ``str(view.path)`` is the
            local path as given, or the URL of a remote checkpoint).
        detection: family, kind and the evidence.
        files: the files it consists of (relative to ``path`` or its folder).
        tensors: tensor records in the checkpoint's logical order (its state_dict or index
            order), a sequence that makes each record when it is first asked for
            (:class:`~.record_table.RecordTable`); :meth:`disk_order` sorts them by file and
            offset for streaming.
        values: non-tensor leaves (hyperparameters, steps, RNG states as inert objects).
        parts: for a training-state folder, the view of each part.
        optimizer: optimizer structure, for optimizer checkpoints.
        warnings: things noticed while listing that do not stop reading.
        traits: what consumers act on (parameter order kept, EMA copy, flat optimizer
            partitions ...), from the reader and the family (:mod:`.readers.traits`).
        state_map: what each entry is — model, optimizer (each state in its slot),
            scheduler, run position, RNG — decided by the readers on first use
            (:mod:`.readers.state_map`).

    Example:
        >>> view = open_checkpoint("ckpt/")                        # doctest: +SKIP
        >>> [(r.name, r.dtype, r.shape) for r in view.tensors][:2]   # doctest: +SKIP
        >>> view.load("model.embed_tokens.weight")[:2]               # doctest: +SKIP
    """

    def __init__(
        self,
        path: PathLike,
        detection: Detection,
        files: tuple[FileInfo, ...] = (),
        tensors: Iterable[TensorRecord] = (),
        values: Mapping[str, Any] | None = None,
        parts: Mapping[str, CheckpointView] | None = None,
        optimizer: OptimizerInfo | None = None,
        warnings: tuple[str, ...] = (),
    ) -> None:
        self.path: Location = as_location(path)
        self._detection = detection
        self._traits: Traits | None = None
        self._state_map: StateMap | None = None
        self.files = files
        self.tensors = RecordTable.from_records(tensors)
        self.values: dict[str, Any] = dict(values or {})
        self.parts: dict[str, CheckpointView] = dict(parts or {})
        self.optimizer = optimizer
        self.warnings = warnings
        self._positions: dict[str, int] | None = None  # name -> index of its (last) record

    def _by_name(self) -> dict[str, int]:
        if self._positions is None:
            names = self.tensors.column("name")
            self._positions = dict(zip(names, range(len(names)), strict=True))
        return self._positions

    @property
    def detection(self) -> Detection:
        return self._detection

    @detection.setter
    def detection(self, detection: Detection) -> None:
        self._detection = detection
        self._traits = self._state_map = None  # decided again for the new detection

    @property
    def family(self) -> str:
        return self.detection.family

    @property
    def traits(self) -> Traits:
        if self._traits is None:
            self._traits = _decider().traits(self)
        return self._traits

    @property
    def state_map(self) -> StateMap:
        if self._state_map is None:
            self._state_map = _decider().state_map(self)
        return self._state_map

    def _owner(self, name: str) -> tuple[CheckpointView, str] | None:
        """The view whose own entry ``name`` is (``<part>/<name>`` names a part's entry)."""
        found = self.state_map
        if name in found.slots:
            return self, name
        if name in found.in_parts:
            part_name, own = found.in_parts[name]
            return self.parts[part_name], own
        part, sep, rest = name.partition("/")
        owner = self.parts.get(part) if sep else None
        return (owner, rest) if owner is not None else None

    def slot(self, name: str) -> Slot | None:
        """The optimizer slot of the entry ``name`` (``[<part>/]<name>``), None for entries
        that are not per-parameter optimizer states."""
        found = self._owner(name)
        return found[0].state_map.slots.get(found[1]) if found is not None else None

    def slot_param(self, name: str) -> str | None:
        """The parameter name behind the optimizer state ``name``, where it is known."""
        found = self._owner(name)
        if found is None:
            return None
        owner, own = found
        slot = owner.state_map.slots.get(own)
        if slot is None:
            return None
        for opt in owner.state_map.optimizers:
            if opt.prefix == slot.optimizer:
                return opt.param_names.get(slot.param_id)
        return None

    @property
    def kind(self) -> str:
        return self.detection.kind

    @property
    def total_bytes(self) -> int:
        return sum(f.nbytes for f in self.files)

    @property
    def tensor_bytes(self) -> int:
        return self.tensors.nbytes_total()

    def model_parameter_count(self) -> tuple[int, tuple[str, ...]] | None:
        """(elements of the model, where they were counted) — the model only, never optimizer
        moments, RNG or run state; None when the checkpoint holds no model.

        A view with parts counts its model / adapter parts (their names are returned), else
        the model of a training state among them; parts holding the same parameters (DeepSpeed's module copy and its fp32 masters, an EMA
        copy) count once: a name (without the module prefix) and shape counted in one part is
        not counted again. A one-view training state counts its model entries (``model.*``).
        Tied names sharing one storage count once.
        """
        if self.parts:
            models = [(n, p) for n, p in self.parts.items() if p.kind in ("model", "adapter")]
            if not models:  # a nested training state (a DeepSpeed folder in a Trainer's)
                nested = [(n, p) for n, p in self.parts.items() if p.kind == "training_state"]
                for n, p in nested:
                    counted = p.model_parameter_count()
                    if counted is not None:
                        return counted[0], (n,)
                return None
            seen: set[tuple[str, tuple[int, ...]]] = set()
            records: list[TensorRecord] = []
            for _, p in models:
                prefix = p.traits.module_prefix
                keys = [(r.name.removeprefix(prefix), tuple(r.shape)) for r in p.tensors]
                records += [r for r, k in zip(p.tensors, keys, strict=True) if k not in seen]
                seen.update(keys)
            return unique_numel(records), tuple(n for n, _ in models)
        if self.kind in ("model", "adapter"):
            return self.element_count, ()
        if self.kind != "training_state" or not self.state_map.model:
            return None
        model = self.state_map.model
        heads = {r.name.split(".", 1)[0] for r in model}
        shown = (next(iter(heads)) + ".*",) if len(heads) == 1 and len(model) > 1 else ()
        return unique_numel(model), shown

    @property
    def element_count(self) -> int:
        """Elements of the tensors, each storage view counted once: tied names sharing one
        storage at the same place (a ``.bin`` of T5's ``shared`` / ``embed_tokens`` /
        ``lm_head``) are one parameter."""
        return unique_numel(self.tensors)

    @property
    def unique_tensor_bytes(self) -> int:
        """Tensor bytes with tied aliases counted once (what the files hold)."""
        if not self.tensors.aliasing_possible():
            return self.tensors.nbytes_total()
        return sum(r.nbytes for r in unique_records(self.tensors))

    def disk_order(self) -> list[TensorRecord]:
        """Records sorted by (file, offset): the order that reads each file front to back."""
        files = {f.path: i for i, f in enumerate(self.files)}
        return sorted(
            self.tensors, key=lambda r: (files.get(r.file, len(files)), r.file, r.offset or 0)
        )

    def names(self) -> list[str]:
        return list(self.tensors.column("name"))

    def __contains__(self, name: object) -> bool:
        return name in self._by_name()

    def __iter__(self) -> Iterator[TensorRecord]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def disk_range(self, record: TensorRecord) -> tuple[Location, int, int] | None:
        """``(file, offset, nbytes)`` of ``record``'s bytes, for read-ahead (None when they are
        not one range of a file)."""
        root = self.path if self.path.is_dir() else self.path.parent
        path = root / record.file
        if record.offset is None or not path.is_file():
            return None
        return path, record.offset, record.nbytes

    def record(self, name: str) -> TensorRecord:
        try:
            return self.tensors[self._by_name()[name]]
        except KeyError:
            raise CkptExplorerError(
                self.path,
                f"a tensor named {name!r}",
                f"{len(self._by_name())} other names",
                "List the names with `ckpt-explorer inspect`.",
            ) from None

    def load(self, name: str) -> torch.Tensor:
        """The tensor's values (mmapped where the format allows; do not modify in place)."""
        record = self.record(name)
        if record.read_values is None:
            raise CkptExplorerError(self.path, f"loadable data for {name!r}", "none")
        return record.read_values()

    def parameter_name(self, param_id: int) -> str | None:
        if self.optimizer is None:
            return None
        return self.optimizer.param_names.get(param_id)

    def with_optimizer(self, optimizer: OptimizerInfo) -> CheckpointView:
        """A copy of this view with different optimizer structure (e.g. names attached)."""
        return CheckpointView(
            self.path,
            self.detection,
            self.files,
            self.tensors,
            self.values,
            self.parts,
            optimizer,
            self.warnings,
        )

    def __repr__(self) -> str:
        return (
            f"CheckpointView({str(self.path)!r}, family={self.family!r}, kind={self.kind!r}, "
            f"tensors={len(self.tensors)}, files={len(self.files)})"
        )


class Decider(Protocol):
    """How a view's traits and state map are decided: by the readers (``readers/__init__.py``
    sets it with :func:`use_decider`). The view only carries and caches the answers; it sits
    below the readers and imports none of them."""

    def traits(self, view: CheckpointView) -> Traits: ...

    def state_map(self, view: CheckpointView) -> StateMap: ...


_DECIDER: list[Decider] = []


def use_decider(decider: Decider) -> None:
    """Set the readers' :class:`Decider` (once, when ``ckpt_explorer.readers`` is imported)."""
    _DECIDER[:] = [decider]


def _decider() -> Decider:
    if not _DECIDER:  # every view is made by a reader, so the readers are imported by now
        raise RuntimeError("ckpt_explorer.readers is not imported: nothing decides traits")
    return _DECIDER[0]


def prefixed(records: Iterable[TensorRecord], prefix: str, file_prefix: str) -> list[TensorRecord]:
    """Records of a part, renamed ``<prefix>/<name>`` with files relative to the bundle."""
    return [replace(r, name=f"{prefix}/{r.name}", file=f"{file_prefix}{r.file}") for r in records]


def as_rank_file(view: CheckpointView) -> CheckpointView:
    """``view`` (one rank's own file) as kind ``rank_file``: per-file detail of a checkpoint
    whose logical parts already hold its content joined with the other ranks'. Checks and
    listings take the logical parts; a rank file is opened on its own to see it as saved."""
    view.detection = replace(view.detection, kind="rank_file")
    return view


def unique_records(records: Iterable[TensorRecord]) -> list[TensorRecord]:
    """``records`` without the aliases of one storage view (same file, storage, offset, shape
    and dtype): the first name of each tied set stays."""
    if not isinstance(records, RecordTable):
        records = list(records)
    if not _aliasing_possible(records):
        return list(records)  # no storages (safetensors): nothing can alias
    seen: set[tuple[object, ...]] = set()
    out = []
    for r in records:
        if r.storage_key is not None:
            key = (r.file, r.storage_key, r.offset, r.shape, r.dtype)
            if key in seen:
                continue
            seen.add(key)
        out.append(r)
    return out


def unique_numel(records: Iterable[TensorRecord]) -> int:
    """Elements of ``records``, aliases of one storage view counted once."""
    if isinstance(records, RecordTable) and not records.aliasing_possible():
        return records.element_total()  # from the columns: no record is made
    return sum(map(math.prod, map(attrgetter("shape"), unique_records(records))))


def _aliasing_possible(records: Iterable[TensorRecord]) -> bool:
    keys = record_column(records, "storage_key")
    return keys.count(None) != len(keys)
