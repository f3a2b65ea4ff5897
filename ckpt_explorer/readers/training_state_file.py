"""One-file training states: a torch.save of ``{'model': sd, 'optimizer': osd, ...}``.

Plain-PyTorch and nanoGPT loops save ``{'model', 'optimizer', 'scheduler', 'iter_num',
'model_args', 'config', ...}``; PyTorch Lightning saves ``state_dict``, ``optimizer_states``
and ``lr_schedulers`` lists beside ``epoch``/``global_step``. Components are recognised by what
each entry *is* (the same content rules as whole files), never by the key's name. The file's
view keeps its top-level tensor names (``model.<param>``, ``optimizer.state.0.exp_avg``);
``view.parts`` holds one view per component, named by its key, whose tensors are named as the
component knows them (``<param>``, ``state.0.exp_avg``), plus the run position/RNG part
:data:`RUN_PART` for the loose top-level values. A part's one FileInfo is the shared file,
sized by the bytes of that entry's tensors (the parts share one file).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..io.location import Location
from ..types import Detection, FileInfo, TensorRecord
from ..view import CheckpointView
from .optimizer_info import optimizer_info_from_tree
from .roles import META_KEYS, content_traits, rng_entries
from .tree import flatten

Classify = Callable[[Any], tuple[str, str, list[str]]]
COMPONENT_KINDS = ("model", "optimizer", "scheduler", "rng")
RUN_PART = "(run position)"
DETAIL = "one-file training state"


Component = tuple[str, str, str, Any]  # key, kind, detail, the entry


def components(root: Any, classify: Classify) -> list[Component]:
    """``(key, kind, detail, entry)`` of the entries of ``root`` that are state components."""
    if not isinstance(root, dict):
        return []
    found: list[Component] = []
    for key, value in root.items():
        entries = (
            [(f"{key}.{i}", v) for i, v in enumerate(value)]
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value)
            else [(str(key), value)]
        )
        for name, entry in entries:
            if not isinstance(entry, dict) or not entry:
                continue
            kind, detail, _ = classify(entry)
            if kind == "optimizer" and detail != "optimizer state_dict":
                continue
            if kind in COMPONENT_KINDS:
                found.append((name, kind, detail, entry))
    return found


def is_one_file_state(found: list[Component]) -> bool:
    """Two of model / optimizer / scheduler side by side."""
    kinds = {c[1] for c in found}
    return len(kinds & {"model", "optimizer", "scheduler"}) >= 2


def _under(name: str, key: str) -> str | None:
    return name[len(key) + 1 :] if name.startswith(key + ".") else None


def _part(
    path: Location,
    family: str,
    component: Component,
    records: list[TensorRecord],
) -> CheckpointView:
    key, kind, detail, entry = component
    mine = [replace(r, name=rest) for r in records if (rest := _under(r.name, key)) is not None]
    own_values = {name: leaf for name, leaf, is_tensor in flatten(entry) if not is_tensor}
    optimizer = optimizer_info_from_tree(mine, own_values) if kind == "optimizer" else None
    detection = Detection(
        str(path),
        family,
        kind,
        (f"entry {key!r} of a one-file training state: {detail}",),
        detail,
        content_traits(detail),
    )
    return CheckpointView(
        path,
        detection,
        (FileInfo(path.name, sum(r.nbytes for r in mine)),),
        tuple(mine),
        own_values,
        optimizer=optimizer,
    )


def split_parts(
    path: Location,
    family: str,
    root: dict[Any, Any],
    records: list[TensorRecord],
    values: dict[str, Any],
    classify: Classify,
) -> dict[str, CheckpointView]:
    """One view per component of a one-file training state, plus the run-position part."""
    parts: dict[str, CheckpointView] = {}
    found = components(root, classify)
    for component in found:
        parts[component[0]] = _part(path, family, component, records)
    keys = {c[0].split(".")[0] for c in found}
    loose = {k: v for k, v in values.items() if k.split(".")[0] not in keys}
    loose_records = [r for r in records if r.name.split(".")[0] not in keys]
    rng = rng_entries({k: v for k, v in root.items() if str(k) not in keys})
    meta = sorted(set(loose) & META_KEYS)
    if rng or meta:
        evidence = [f"{k!r}: {kind} RNG state" for k, kind in rng.items()]
        if meta:
            evidence.append("run position keys " + ", ".join(meta))
        parts[RUN_PART] = CheckpointView(
            path,
            Detection(
                str(path),
                family,
                "rng" if rng else "running_state",
                tuple(evidence),
                "RNG states and run position" if rng else "run position",
            ),
            (FileInfo(path.name, sum(r.nbytes for r in loose_records)),),
            tuple(loose_records),
            loose,
        )
    return parts


def part_prefix(name: str) -> str:
    """The prefix of a one-file part's names in the file's own view."""
    return "" if name == RUN_PART else name + "."
