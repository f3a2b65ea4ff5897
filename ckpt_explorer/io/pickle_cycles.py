"""Cut the back references of an unpickled tree, so that readers can walk it.

Some checkpoints hold objects that point back at their container: OmegaConf configs (Hydra,
Lightning's ``save_hyperparameters(cfg)``, NeMo) keep a ``_parent`` in every node. Walking such
a tree never ends. Each reference to an object that is still being walked (an ancestor) is
replaced by a short text naming it, where its holder can be changed (a dict, a list, an opaque
object's state); the other references, shared ones included, stay. A cycle through an immutable
holder (a tuple) is left in place, and the walk budget refuses it as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .pickle_limits import LEAF_TYPES

# (value, replace) for each reference an object holds; replace is None when the holder cannot
# be changed (tuple elements, dict keys)
Slots = Callable[[Any], Iterator[tuple[Any, Callable[[Any], None] | None]]]


def back_reference(target: Any) -> str:
    """The text that stands for a reference back to ``target``."""
    name = getattr(target, "qualified_name", None) or type(target).__name__
    return f"<reference back to an enclosing {name}>"


def cut_back_references(root: Any, slots: Slots) -> int:
    """Replace, in place, every reference to an ancestor under ``root``; return how many."""
    on_path: set[int] = set()
    done: set[int] = set()
    cut = 0
    stack: list[tuple[Any, Iterator[tuple[Any, Callable[[Any], None] | None]]]] = []
    if not isinstance(root, LEAF_TYPES):
        on_path.add(id(root))
        stack.append((root, slots(root)))
    while stack:
        node, refs = stack[-1]
        for child, replace in refs:
            if isinstance(child, LEAF_TYPES) or id(child) in done:
                continue
            if id(child) in on_path:
                if replace is not None:
                    replace(back_reference(child))
                    cut += 1
                continue
            on_path.add(id(child))
            stack.append((child, slots(child)))
            break
        else:
            stack.pop()
            on_path.discard(id(node))
            done.add(id(node))
    return cut
