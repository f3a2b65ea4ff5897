"""The names and sizes inside shard files, from safetensors headers and pickle structure
(the project's restricted unpickler: nothing in a shard runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import CkptExplorerError
from ..io.safe_pickle import LazyTensor
from ..io.safetensors_header import DTYPES, read_header
from ..loadable.files import is_safetensors


class Refused(Exception):
    """The shards do not decide one answer; the message says why."""


def model_entries(path: Path) -> list[tuple[str, int, str]]:
    """``(name, nbytes, storage id)`` of each tensor in a model shard, in file order."""
    try:
        if is_safetensors(path):
            h = read_header(path)
            return [(e.name, e.end - e.begin, f"{path.name}:{e.name}") for e in h.entries]
        from ..readers.torch_pickle import torch_structure

        root = torch_structure(path).root
    except (CkptExplorerError, OSError) as e:
        raise Refused(f"{path.name} cannot be read: {e}") from e
    if not isinstance(root, dict) or not all(isinstance(v, LazyTensor) for v in root.values()):
        raise Refused(f"{path.name} is not a {{name: tensor}} model shard")
    return [(str(k), t.nbytes, t.storage.key) for k, t in root.items()]


def optimizer_entries(path: Path) -> list[tuple[int, list[int]]]:
    """``(param id, [tensor nbytes of its states])`` in a ColossalAI optimizer shard."""
    try:
        if is_safetensors(path):
            return _flat_entries(path)
        from ..readers.torch_pickle import torch_structure

        root = torch_structure(path).root
    except (CkptExplorerError, OSError) as e:
        raise Refused(f"{path.name} cannot be read: {e}") from e
    if not isinstance(root, dict):
        raise Refused(f"{path.name} is not an optimizer shard ({{param id: states}})")
    out = []
    for k, states in root.items():
        if not (isinstance(k, int) or (isinstance(k, str) and k.isdigit())):
            raise Refused(f"{path.name} has key {k!r}, not a param id")
        sizes = [v.nbytes for v in _values(states) if isinstance(v, LazyTensor)]
        out.append((int(k), sizes))
    return out


def _values(states: Any) -> list[Any]:
    return list(states.values()) if isinstance(states, dict) else []


def _flat_entries(path: Path) -> list[tuple[int, list[int]]]:
    h = read_header(path)
    skip = set(h.metadata.get("non_tensor_keys", "").strip("[]").replace('"', "").split(", "))
    by_id: dict[int, list[int]] = {}
    for e in h.entries:
        parts = e.name.split(".")
        if len(parts) != 3 or parts[0] != "state" or not parts[1].isdigit():
            raise Refused(f"{path.name} holds {e.name!r}, not state.<id>.<name>")
        by_id.setdefault(int(parts[1]), [])
        if e.name not in skip and e.dtype in DTYPES:
            by_id[int(parts[1])].append(e.end - e.begin)
    return list(by_id.items())
