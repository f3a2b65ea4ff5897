"""Objects that refer back to their container: cut where the holder can change, else refused.

Made with the real pickler (``torch.save`` / ``pickle.dumps`` of self-referencing objects, as
OmegaConf's parent pointers and user classes produce them).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import pytest
import torch

from ckpt_explorer import open_checkpoint
from ckpt_explorer.errors import CkptExplorerError
from ckpt_explorer.io.safe_pickle import SafeUnpickler


class Node:
    """A config node that knows its parent (as OmegaConf's nodes do)."""

    def __init__(self, parent: object = None) -> None:
        self.parent = parent
        self.children: list[Node] = []


def test_parent_pointers_are_cut_and_the_rest_kept(tmp_path: Path) -> None:
    root = Node()
    root.children = [Node(root), Node(root)]
    shared = torch.ones(3)
    path = tmp_path / "state.pt"
    torch.save({"model": {"w": shared}, "cfg": root, "again": [shared]}, path)
    unpickler = SafeUnpickler(io.BytesIO(pickle.dumps({"cfg": root})))
    tree = unpickler.load()
    children = tree["cfg"].state["children"]
    parents = [c.state["parent"] for c in children]
    assert all(p.startswith("<reference back to an enclosing") for p in parents), parents
    assert all(p.endswith("Node>") for p in parents), parents
    assert unpickler.report.back_references == 2
    view = open_checkpoint(path)  # opens, and the shared tensor stays listed under both names
    assert {r.name for r in view.tensors} >= {"model.w", "again.0"}


def test_a_list_holding_itself_is_cut() -> None:
    loop: list[object] = [1]
    loop.append(loop)
    got = SafeUnpickler(io.BytesIO(pickle.dumps({"x": loop}))).load()
    assert got["x"][0] == 1 and "reference back" in got["x"][1]


def test_a_cycle_through_a_tuple_is_still_refused(tmp_path: Path) -> None:
    """A tuple cannot be changed: the cycle stays and the walk budget refuses the file."""
    holder: list[object] = []
    holder.append((holder,))
    path = tmp_path / "loop.pt"
    torch.save({"w": torch.ones(2), "loop": holder}, path)
    with pytest.raises(pickle.UnpicklingError, match="not allowed"):
        SafeUnpickler(io.BytesIO(pickle.dumps({"loop": holder}))).load()
    with pytest.raises(CkptExplorerError, match="refused construct"):
        open_checkpoint(path)
