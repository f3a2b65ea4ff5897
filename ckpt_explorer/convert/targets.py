"""Conversion targets and file writers: the one place their names are listed.

A target (``convert --to NAME``) is a :class:`TargetSpec`: how a model's tensors are laid out in
files (its planner), what it can hold besides a model, its file suffix, how the output is
verified and whether the torchrun job writes it. A writer (``PlannedFile.writer``) is a
:class:`WriterSpec`. The planner, the jobs, verification, the torchrun job, the CLI's ``--to``
choices and the dashboard read these tables; nothing else names a target or a writer.

To add a target: one module with its planner (and writer / verifier when it has its own), and
one ``register_target(TargetSpec(...))`` line below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import CkptExplorerError
from . import gguf_target
from .layouts import HF_DEFAULT_SHARD, Planner, dcp_folder, one_file, shard_folder
from .plan_types import ConversionPlan, PlannedFile

if TYPE_CHECKING:
    from ..contracts import Cancel
    from .writers import Tick


class Verifier(Protocol):
    """Mismatches between an output and its plan (of ``files``, or of all): empty: verified."""

    def __call__(
        self, plan: ConversionPlan, output: Path, files: Iterable[PlannedFile] | None = None
    ) -> list[str]: ...


Write = Callable[[Path, PlannedFile, "Tick | None", "Cancel | None", bool], None]
"""Writes one planned file under the root folder (tick: bytes written; bool: fsync now)."""


# A frozen spec of names and callables: alike in shape with other records (types.FileInfo) only.
@dataclass(frozen=True)
class WriterSpec:
    """A file writer: ``write(root, file, tick, cancel, sync)``."""

    name: str
    write: Write


@dataclass(frozen=True)
class TargetSpec:
    """One conversion target.

    Attributes:
        name: the ``--to`` value.
        summary: one line for help texts.
        plan: lays a model's tensors out in files (see :mod:`~ckpt_explorer.convert.layouts`).
        suffix: the file suffix of a one-file output ("" where the output is a folder).
        shards: a shard size makes a folder of shards (the suffix is then dropped).
        hf_model: a Hugging Face model format: the source is read as an HF model (a Megatron
            state gives its HF model and config.json), wrapper prefixes are unwrapped, and the
            parts of a training state that are not the model are left out without asking.
        whole_state: holds a whole DCP training state in one file.
        optimizer_file: an unsharded optimizer state is written as one torch file.
        optimizer_shards: a sharded optimizer state is a ColossalAI sharded optimizer folder.
        dtypes: the ``--dtype`` values the target itself applies (name -> its type); None:
            the planner's cast of floating tensors applies.
        verify: its own verification; None: the output is reopened and compared bit for bit.
        torchrun: how the torchrun job writes it: "shared" (files shared out over ranks),
            "rank0" (one rank writes everything), "" (not supported: one process).
        colossalai: what ColossalAI's Booster saves for it with ``--engine colossalai``
            ("safetensors" or "torch" files); "" where that engine does not write it.
    """

    name: str
    summary: str
    plan: Planner
    suffix: str = ""
    shards: bool = False
    hf_model: bool = False
    whole_state: bool = False
    optimizer_file: bool = False
    optimizer_shards: bool = False
    dtypes: Mapping[str, str] | None = None
    verify: Verifier | None = None
    torchrun: str = "shared"
    colossalai: str = ""


TARGETS: dict[str, TargetSpec] = {}
WRITERS: dict[str, WriterSpec] = {}


def register_target(spec: TargetSpec) -> TargetSpec:
    if spec.name in TARGETS:
        raise ValueError(f"conversion target {spec.name!r} registered twice")
    TARGETS[spec.name] = spec
    return spec


def register_writer(spec: WriterSpec) -> WriterSpec:
    if spec.name in WRITERS:
        raise ValueError(f"writer {spec.name!r} registered twice")
    WRITERS[spec.name] = spec
    return spec


def target(name: str) -> TargetSpec:
    """The spec of ``--to name``.

    Raises:
        CkptExplorerError: no target has that name (the known ones are listed).
    """
    spec = TARGETS.get(name)
    if spec is None:
        raise CkptExplorerError(None, f"--to one of {', '.join(TARGETS)}", repr(name))
    return spec


def target_names() -> list[str]:
    """The ``--to`` choices, in registration order."""
    return list(TARGETS)


def write_file(
    root: Path, pf: PlannedFile, tick: Tick | None, cancel: Cancel | None, sync: bool
) -> None:
    """Write ``pf`` under ``root`` with its writer."""
    WRITERS[pf.writer].write(root, pf, tick, cancel, sync)


def _safetensors(
    root: Path, pf: PlannedFile, tick: Tick | None, cancel: Cancel | None, sync: bool
) -> None:
    from .writers import write_safetensors

    write_safetensors(root / pf.name, pf.tensors, tick, cancel, sync=sync)


def _torch(
    root: Path, pf: PlannedFile, tick: Tick | None, cancel: Cancel | None, sync: bool
) -> None:
    from .writers import write_torch

    write_torch(root / pf.name, pf, tick, cancel)


def _dcp(root: Path, pf: PlannedFile, tick: Tick | None, cancel: Cancel | None, sync: bool) -> None:
    from .writers import write_dcp

    write_dcp(root, pf, tick, cancel)


register_writer(WriterSpec("safetensors", _safetensors))
register_writer(WriterSpec("torch", _torch))
register_writer(WriterSpec("dcp", _dcp))
register_writer(WriterSpec("gguf", gguf_target.write))

_SAFETENSORS_FOLDER = shard_folder("safetensors", "model", "safetensors")
register_target(
    TargetSpec(
        "safetensors",
        "one .safetensors file (a folder of shards with --max-shard-size)",
        one_file("safetensors", _SAFETENSORS_FOLDER),
        suffix=".safetensors",
        shards=True,
        colossalai="safetensors",
    )
)
register_target(
    TargetSpec(
        "bin",
        "one torch .bin file (a folder of shards with --max-shard-size)",
        one_file("torch", shard_folder("torch", "pytorch_model", "bin")),
        suffix=".bin",
        shards=True,
        optimizer_file=True,
        optimizer_shards=True,
        colossalai="torch",
    )
)
register_target(
    TargetSpec(
        "hf",
        "a Hugging Face folder: safetensors shards (5GB), index, config.json",
        shard_folder("safetensors", "model", "safetensors", HF_DEFAULT_SHARD),
        hf_model=True,
        colossalai="safetensors",
    )
)
register_target(
    TargetSpec(
        "torch",
        "one torch.save file (a whole DCP training state kept whole)",
        one_file("torch"),
        suffix=".pt",
        whole_state=True,
        optimizer_file=True,
        colossalai="torch",
    )
)
register_target(TargetSpec("dcp", "a torch DCP folder", dcp_folder, torchrun="rank0"))
register_target(
    TargetSpec(
        "gguf",
        "one GGUF file (llama.cpp): --dtype f32, f16 (default), bf16 or q8_0",
        gguf_target.plan_gguf,
        suffix=".gguf",
        hf_model=True,
        dtypes=gguf_target.DTYPES,
        verify=gguf_target.verify,
        torchrun="",
    )
)
