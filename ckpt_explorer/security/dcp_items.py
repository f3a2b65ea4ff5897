"""The byte ranges a torch DCP load reads from each ``.distcp`` file, from its ``.metadata``.

``FileSystemReader`` unpickles ``.metadata`` (with a free ``pickle.load``), then, for every
item of ``storage_data``, ``torch.load``s ``length`` bytes at ``offset`` of ``relative_path``:
tensors with ``weights_only=True``, bytes items with ``weights_only=False``. Each range is
therefore judged here as a file of its own. The metadata is read with the allow-list
unpickler only after its own walk found it safe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..io.location import Location
from ..io.safe_pickle import OpaqueObject, PickleReport, safe_loads

MAX_METADATA = 512 * 2**20


@dataclass
class DcpPlan:
    """``relative path -> [(offset, length, what)]``, and what keeps items from being judged."""

    items: dict[str, list[tuple[int, int, str]]] = field(default_factory=dict)
    doubts: list[str] = field(default_factory=list)


def _fields(obj: Any) -> dict[str, Any]:
    if isinstance(obj, OpaqueObject):
        state = obj.state
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state = {**(state[0] or {}), **state[1]}
        return state if isinstance(state, dict) else {}
    return {}


def read_plan(meta: Path | Location) -> DcpPlan:
    """Every item range ``meta`` names, grouped by data file (names checked to stay in the
    folder)."""
    plan = DcpPlan()
    try:
        if meta.stat().st_size > MAX_METADATA:
            plan.doubts.append(
                f"{meta.name}: over {MAX_METADATA >> 20} MiB; its items are not found"
            )
            return plan
        root = safe_loads(meta.read_bytes(), PickleReport())
    except Exception as e:  # the loader fails on it too: no item is read
        plan.doubts.append(f"{meta.name}: its items cannot be found ({type(e).__name__}: {e})")
        return plan
    storage = _fields(root).get("storage_data")
    if not isinstance(storage, dict):
        plan.doubts.append(f"{meta.name}: no storage_data, so its items cannot be found")
        return plan
    bytes_fqns = _bytes_items(_fields(root).get("state_dict_metadata"))
    for key, info in storage.items():
        k, v = _fields(key), _fields(info)
        rel, offset, length = v.get("relative_path"), v.get("offset"), v.get("length")
        fqn = str(k.get("fqn", "?"))
        if not (isinstance(rel, str) and isinstance(offset, int) and isinstance(length, int)):
            plan.doubts.append(f"{meta.name}: an item of {fqn!r} the walk cannot place")
            continue
        if "/" in rel or "\\" in rel or rel in ("", ".", ".."):
            plan.doubts.append(
                f"{meta.name}: item {fqn!r} is read from {rel!r}, outside its folder (not judged)"
            )
            continue
        if v.get("transform_descriptors"):
            plan.doubts.append(
                f"{meta.name}: item {fqn!r} in {rel} is stored transformed "
                f"({v['transform_descriptors']!r}); not judged"
            )
            continue
        what = (
            f"the bytes item {fqn!r}, torch.load weights_only=False"
            if fqn in bytes_fqns
            else f"the tensor {fqn!r}"
        )
        plan.items.setdefault(rel, []).append((offset, length, what))
    return plan


def _bytes_items(sd_meta: Any) -> set[str]:
    if not isinstance(sd_meta, dict):
        return set()
    return {
        str(fqn)
        for fqn, item in sd_meta.items()
        if getattr(item, "qualified_name", "").endswith("BytesStorageMetadata")
    }
