"""CheckpointView: the one lazy view every reader returns and every consumer uses."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import CkptExplorerError
from .record_table import RecordTable, record_column
from .types import Detection, FileInfo, OptimizerInfo, TensorRecord

if TYPE_CHECKING:
    import torch


class CheckpointView:
    """A checkpoint listed from headers, indexes and pickle structure; values load on demand.

    Attributes:
        path: what was opened.
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

    Example:
        >>> view = open_checkpoint("ckpt/")                        # doctest: +SKIP
        >>> [(r.name, r.dtype, r.shape) for r in view.tensors][:2]   # doctest: +SKIP
        >>> view.load("model.embed_tokens.weight")[:2]               # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | Path,
        detection: Detection,
        files: tuple[FileInfo, ...] = (),
        tensors: Iterable[TensorRecord] = (),
        values: Mapping[str, Any] | None = None,
        parts: Mapping[str, CheckpointView] | None = None,
        optimizer: OptimizerInfo | None = None,
        warnings: tuple[str, ...] = (),
    ) -> None:
        self.path = Path(path)
        self.detection = detection
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
    def family(self) -> str:
        return self.detection.family

    @property
    def kind(self) -> str:
        return self.detection.kind

    @property
    def total_bytes(self) -> int:
        return sum(f.nbytes for f in self.files)

    @property
    def tensor_bytes(self) -> int:
        return self.tensors.nbytes_total()

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

    def disk_range(self, record: TensorRecord) -> tuple[Path, int, int] | None:
        """``(file, offset, nbytes)`` of ``record``'s bytes, for read-ahead (None when they are
        not one range of a plain file)."""
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
        if record.loader is None:
            raise CkptExplorerError(self.path, f"loadable data for {name!r}", "none")
        return record.loader()

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
