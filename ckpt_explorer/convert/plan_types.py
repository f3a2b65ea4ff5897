"""The plan of a conversion: which files are written, holding which tensors, from where.

A plan is made before anything is written (``--dry-run`` prints it); the job, the writers and
the verifier only follow it. Plans are deterministic for the same arguments, so every rank of a
distributed job makes the same plan on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..io.location import Location
from ..readable import human_bytes

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from ..types import TensorRecord


@dataclass(frozen=True)
class Piece:
    """A byte range of a source file: ``nbytes`` bytes at absolute ``offset`` of a local file
    (its OS path) or of a remote object (its location, read through the store)."""

    file: str | Location
    offset: int
    nbytes: int


@dataclass(frozen=True)
class PlannedTensor:
    """One output tensor.

    Attributes:
        name: its name in the output.
        source: what it is made from (a source tensor name, or a description).
        dtype, shape, nbytes: as written.
        pieces: when set, the output bytes are exactly these source byte ranges in order
            (the fast path: copied without deserialising); otherwise ``read_values`` gives the values.
        cast_from: the source dtype when an explicit ``--dtype`` cast applies.
        read_values: returns the output tensor's values (already cast); not part of JSON.
    """

    name: str
    source: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    pieces: tuple[Piece, ...] | None = None
    cast_from: str | None = None
    read_values: Callable[[], torch.Tensor] | None = field(default=None, compare=False, repr=False)

    @property
    def fast(self) -> bool:
        return self.pieces is not None and self.cast_from is None

    def unlike(self, record: TensorRecord | None) -> str | None:
        """Why the output's ``record`` is not this tensor as planned (missing, or another dtype
        or shape); None when it is."""
        if record is None:
            return f"{self.name}: missing from the output"
        if record.dtype != self.dtype or tuple(record.shape) != tuple(self.shape):
            return (
                f"{self.name}: {record.dtype} {list(record.shape)} written, "
                f"{self.dtype} {list(self.shape)} planned"
            )
        return None


@dataclass(frozen=True)
class PlannedFile:
    """One output file, relative to the output root.

    ``writer`` names a writer of :data:`~ckpt_explorer.convert.targets.WRITERS` ("safetensors",
    "torch" (a torch.save zip), "dcp", "gguf"). ``named`` is False where the writer fills the
    output folder itself rather than one file of this name (a DCP folder's ``.metadata`` and
    data files). ``layout`` says how a torch
    file arranges its tensors: "flat" ``{name: tensor}``, "optimizer" (a full state_dict),
    "optimizer_shard" (``{id: {state: value}}``), "param_groups" (the group list) or "state"
    (a whole training state: every item at its original path, ``values["__paths__"]``).
    ``values`` are the non-tensor leaves written beside the tensors (``param_groups``, int steps).
    """

    name: str
    writer: str
    tensors: tuple[PlannedTensor, ...]
    layout: str = "flat"
    values: dict[str, Any] = field(default_factory=dict, compare=False)
    named: bool = True

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


@dataclass
class ConversionPlan:
    """Everything a conversion will do, decided before it starts.

    Attributes:
        source, destination: the paths; ``output_is_dir`` says whether the output is a folder.
        source_family, source_kind: what was detected.
        target: a name of :data:`~ckpt_explorer.convert.targets.TARGETS`.
        files: the data files in write order.
        index: ``(file name, kind)`` of the index written by rank 0 ("hf" or
            "colossalai-optimizer"), or None.
        copies: ``(source file, output name)`` of side files copied as they are (config.json).
        written: ``(output name, JSON document)`` of side files the conversion makes (the
            ``config.json`` of a Megatron model converted to HF, built from its args).
        dropped: what the source holds that the output leaves out (parts of a training
            state, non-tensor values), each named.
        options: the arguments that made the plan (a distributed rank re-plans from them).
    """

    source: Location
    destination: Path
    source_family: str
    source_kind: str
    target: str
    output_is_dir: bool
    files: list[PlannedFile]
    index: tuple[str, str] | None = None
    copies: list[tuple[Location, str]] = field(default_factory=list)
    written: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def tensors(self) -> list[PlannedTensor]:
        return [t for f in self.files for t in f.tensors]

    @property
    def total_bytes(self) -> int:
        return sum(f.nbytes for f in self.files)

    @property
    def fast_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors if t.fast)

    def output_files(self) -> list[str]:
        names = [f.name for f in self.files if f.named]
        if self.index is not None:
            names.append(self.index[0])
        return names + [dst for _, dst in self.copies] + [name for name, _ in self.written]

    # a to_json field list: alike in shape with other records' (repair.plan) only
    def to_json(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "source_family": self.source_family,
            "source_kind": self.source_kind,
            "destination": str(self.destination),
            "target": self.target,
            "output_is_dir": self.output_is_dir,
            "tensors": len(self.tensors),
            "total_bytes": self.total_bytes,
            "fast_path_bytes": self.fast_bytes,
            "files": [
                {
                    "name": f.name,
                    "writer": f.writer,
                    "layout": f.layout,
                    "tensors": len(f.tensors),
                    "bytes": f.nbytes,
                    "names": [t.name for t in f.tensors],
                }
                for f in self.files
            ],
            "index": None if self.index is None else {"name": self.index[0], "kind": self.index[1]},
            "copies": [dst for _, dst in self.copies],
            "written": {name: doc for name, doc in self.written},
            "dropped": list(self.dropped),
            "notes": list(self.notes),
            "options": {k: v for k, v in self.options.items() if k != "source"},
        }

    def to_frame(self) -> pd.DataFrame:
        """One row per output data file, in write order: name, writer, layout, tensors,
        bytes (the index and side files are in :meth:`to_json`)."""
        import pandas as pd

        rows = [
            {
                "file": f.name,
                "writer": f.writer,
                "layout": f.layout,
                "tensors": len(f.tensors),
                "bytes": f.nbytes,
            }
            for f in self.files
        ]
        return pd.DataFrame(rows, columns=["file", "writer", "layout", "tensors", "bytes"])

    def describe(self, limit: int = 8) -> str:
        """A readable summary (what ``--dry-run`` prints)."""
        lines = [
            f"source       {self.source} ({self.source_family}, {self.source_kind})",
            f"destination  {self.destination} ({'folder' if self.output_is_dir else 'file'}, "
            f"--to {self.target})",
            f"tensors      {len(self.tensors)}, {format_bytes(self.total_bytes)} "
            f"({format_bytes(self.fast_bytes)} copied byte for byte)",
        ]
        for f in self.files[:limit]:
            names = ", ".join(t.name for t in f.tensors[:3])
            more = f", ... (+{len(f.tensors) - 3})" if len(f.tensors) > 3 else ""
            lines.append(
                f"  {f.name:40} {f.writer:11} {len(f.tensors):6} tensors "
                f"{format_bytes(f.nbytes):>10}  {names}{more}"
            )
        if len(self.files) > limit:
            lines.append(f"  ... {len(self.files) - limit} more files")
        if self.index is not None:
            lines.append(f"  {self.index[0]:40} index ({self.index[1]})")
        for _, dst in self.copies:
            lines.append(f"  {dst:40} copied")
        for name, _ in self.written:
            lines.append(f"  {name:40} written")
        lines += [f"left out     {d}" for d in self.dropped]
        lines += [f"note         {n}" for n in self.notes]
        return "\n".join(lines)


format_bytes = human_bytes  # the project's one byte formatter (readable.py), as inspect says it
