"""A whole DCP training state as one torch.save tree (what ``dcp_to_torch_save`` writes).

DCP flattens a nested state (``{"model": ..., "optim": {"state": ..., "param_groups": [...]}}``)
into dotted FQNs and records each FQN's original path in the metadata's ``planner_data``.
``dcp_to_torch_save`` puts every item back at that path (FQNs without one stay top-level keys);
:func:`set_path` follows the same rules, so the converted file holds the same object.
"""

from __future__ import annotations

import itertools
from typing import Any

from ..errors import CorruptCheckpointError
from ..io.location import PathLike, as_location

MAX_INDEX = 2**20  # a list index in a recorded path (bounds what rebuilding allocates)

ObjPath = tuple[str | int, ...]


def dcp_layout(folder: PathLike) -> tuple[list[str], dict[str, ObjPath]]:
    """(FQNs in metadata order, FQN -> original object path) of a DCP folder, read safely."""
    from ..readers.dcp.folder import metadata_fields

    fields = metadata_fields(as_location(folder))
    order = [str(k) for k in (fields.get("state_dict_metadata") or {})]
    paths: dict[str, ObjPath] = {}
    raw = fields.get("planner_data")
    if isinstance(raw, dict):
        for fqn, path in raw.items():
            if not isinstance(path, tuple | list) or not path:
                continue
            if all(isinstance(p, str) or (type(p) is int and 0 <= p < MAX_INDEX) for p in path):
                paths[str(fqn)] = tuple(path)
    return order, paths


def set_path(root: dict[Any, Any], path: ObjPath, value: Any) -> None:
    """Put ``value`` at ``path`` in ``root`` (dicts for str keys, lists for int keys), as
    ``torch.distributed.checkpoint._traverse.set_element`` does."""
    node: Any = root
    for prev, key in itertools.pairwise(path):
        fresh: Any = {} if isinstance(key, str) else []
        if isinstance(node, dict):
            node = node.setdefault(prev, fresh)
        else:
            assert isinstance(prev, int)
            node.extend([None] * (prev + 1 - len(node)))
            if node[prev] is None:
                node[prev] = fresh
            node = node[prev]
    last = path[-1]
    if isinstance(last, int) and isinstance(node, list):
        node.extend([None] * (last + 1 - len(node)))
    node[last] = value


def build_tree(order: list[str], paths: dict[str, ObjPath], leaf: Any) -> dict[Any, Any]:
    """The nested object: ``leaf(fqn)`` at each FQN's path (or at key ``fqn``).

    Raises:
        CorruptCheckpointError: the recorded paths contradict each other.
    """
    root: dict[Any, Any] = {}
    for fqn in order:
        try:
            set_path(root, paths.get(fqn, (fqn,)), leaf(fqn))
        except (TypeError, IndexError, AssertionError, AttributeError) as e:
            raise CorruptCheckpointError(
                None, f"consistent object paths in the DCP metadata ({fqn})", type(e).__name__
            ) from e
    return root
