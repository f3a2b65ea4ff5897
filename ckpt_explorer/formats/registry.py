"""The registry of checkpoint families: each entry knows how to recognise and open one.

A new format is one reader module plus one :func:`register` call in ``formats/__init__.py``.
Probes run in priority order (lower first) and the first that recognises the path wins;
every probe decides by content (magic bytes, JSON keys, pickle structure), never by extension.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import CkptExplorerError, FormatDetectionError
from ..io.location import Location, PathLike, as_location
from ..readers.diffusers_config import pipeline_summary
from ..types import Detection
from ..view import CheckpointView

Probe = Callable[[Location], Detection | None]
Opener = Callable[[Location, Detection], CheckpointView]


@dataclass(frozen=True)
class FormatSpec:
    """One entry: ``probe(path)`` returns a Detection or None; ``open(path, detection)``."""

    name: str
    families: tuple[str, ...]
    target: str  # "file" or "dir"
    priority: int
    probe: Probe
    open: Opener


_REGISTRY: list[FormatSpec] = []


def register(spec: FormatSpec) -> None:
    _REGISTRY.append(spec)
    _REGISTRY.sort(key=lambda s: s.priority)


def specs(target: str | None = None) -> list[FormatSpec]:
    return [s for s in _REGISTRY if target is None or s.target == target]


def spec_for(detection: Detection, target: str) -> FormatSpec:
    for spec in specs(target):
        if detection.family in spec.families:
            return spec
    raise KeyError(detection.family)


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
    return f"a file of {size} bytes starting {head!r}"


def detect(path: PathLike) -> tuple[Detection, FormatSpec]:
    """Detect the family of ``path``; raises :class:`FormatDetectionError` if none fits."""
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
    expected = (
        "a checkpoint (safetensors, torch.save, HF/ColossalAI index, DCP, DeepSpeed, PEFT, "
        "or a training-state folder)"
    )
    if target == "dir":
        from ..loadable.damaged import explain  # shards whose index / metadata / latest is gone

        damaged = explain(path)
        if damaged is not None:
            raise FormatDetectionError(path, expected, *damaged)
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
