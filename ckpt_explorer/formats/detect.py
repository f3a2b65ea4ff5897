"""Detect a path's family: the registry's probes in priority order, the first that fits wins.

When none fits, the error says what was found: a damaged layout (through ``explain``, which the
caller passes in: the loader checks live above formats/), a folder of several GGUF exports (each
named, the user picks one), a diffusers pipeline folder, or what the path holds.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import CkptExplorerError, FormatDetectionError
from ..io.location import Location, PathLike, as_location
from ..io.numpy_files import NPY_MAGIC, describe_npy
from ..readers.gguf.exports import several_exports
from ..readers.hf.diffusers_config import pipeline_summary
from ..types import Detection
from .registry import FormatSpec, specs

Explain = Callable[[Location], "tuple[str, str] | None"]  # a folder -> (what was found, what to do)
EXPECTED = (
    "a checkpoint (safetensors, torch.save, HF/ColossalAI index, DCP, DeepSpeed, PEFT, "
    "or a training-state folder)"
)


NPY_HEAD = 1 << 16  # an .npy header fits (numpy writes a few hundred bytes)


def _describe(path: Location) -> str:
    if path.is_dir():
        entries = sorted(p.name for p in path.iterdir())
        shown = ", ".join(entries[:6]) + (", ..." if len(entries) > 6 else "")
        return (
            f"a directory of {len(entries)} entries ({shown})" if entries else "an empty directory"
        )
    size = path.stat().st_size
    if size == 0:
        return "an empty file"
    with path.open("rb") as f:
        head = f.read(12)
        if head.startswith(NPY_MAGIC):
            npy = describe_npy(head + f.read(NPY_HEAD))
            if npy is not None:
                return npy
    return f"a file of {size} bytes starting {head!r}"


def detect(path: PathLike, explain: Explain | None = None) -> tuple[Detection, FormatSpec]:
    """Detect the family of ``path`` and the entry that opens it.

    Args:
        path: a checkpoint file or folder.
        explain: for a folder no probe fits, says what was found when it is a damaged layout
            (shards whose index, metadata or ``latest`` is gone) and what to do.

    Raises:
        FormatDetectionError: nothing known fits; the message says what was found.
    """
    path = as_location(path)
    if not path.exists():
        raise FormatDetectionError(
            path, "an existing file or directory", "nothing at that path", "Check the path."
        )
    target = "dir" if path.is_dir() else "file"
    for spec in specs(target):
        try:
            detection = spec.probe(path)
        except CkptExplorerError:
            raise
        except OSError as e:
            raise FormatDetectionError(path, "a readable checkpoint", f"{e}") from e
        if detection is not None:
            return detection, spec
    expected = EXPECTED
    if target == "dir" and explain is not None:
        damaged = explain(path)
        if damaged is not None:
            raise FormatDetectionError(path, expected, *damaged)
    several = several_exports(path) if target == "dir" else None
    if several is not None:
        raise FormatDetectionError(path, "one GGUF export (a file or one split set)", *several)
    pipeline = pipeline_summary(path) if target == "dir" else None
    if pipeline is not None:
        found, first = pipeline
        raise FormatDetectionError(
            path,
            expected,
            found,
            f"Open one model folder, e.g. `ckpt-explorer inspect {path / first}`.",
        )
    raise FormatDetectionError(
        path,
        expected,
        _describe(path),
        "Point at the checkpoint file or its folder; `ckpt-explorer formats` lists what is known.",
    )
