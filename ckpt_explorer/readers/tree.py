"""Flatten an unpickled object tree into named tensor leaves and named plain values."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..io.safe_pickle import LazyTensor, OpaqueObject

MAX_DEPTH = 64


def _children(obj: Any) -> list[tuple[str, Any]] | None:
    if isinstance(obj, dict):
        return [(str(k), v) for k, v in obj.items()]
    if isinstance(obj, list | tuple):
        return [(str(i), v) for i, v in enumerate(obj)]
    if isinstance(obj, OpaqueObject):
        kids: list[tuple[str, Any]] = []
        if isinstance(obj.state, dict):
            kids += [(str(k), v) for k, v in obj.state.items()]
        kids += [(str(k), v) for k, v in obj.items.items()]
        kids += [(str(i), v) for i, v in enumerate(obj.list_items)]
        return kids
    return None


def contains_tensor(obj: Any, is_tensor: Callable[[Any], bool], depth: int = 0) -> bool:
    if is_tensor(obj):
        return True
    if depth >= MAX_DEPTH:
        return False
    kids = _children(obj)
    return bool(kids) and any(contains_tensor(v, is_tensor, depth + 1) for _, v in kids or ())


def flatten(
    root: Any,
    is_tensor: Callable[[Any], bool] = lambda o: isinstance(o, LazyTensor),
    prefix: str = "",
) -> Iterator[tuple[str, Any, bool]]:
    """Yield ``(dotted_name, leaf, is_tensor)``.

    The root container is always expanded one level; deeper containers are expanded only when
    they hold a tensor somewhere, so ``param_groups`` stays one value while ``state.0.exp_avg``
    becomes a tensor leaf.
    """
    kids = _children(root)
    if kids is None or (is_tensor(root)):
        yield prefix.rstrip("."), root, is_tensor(root)
        return
    stack: list[tuple[str, Any, int]] = [(prefix + k, v, 1) for k, v in reversed(kids)]
    while stack:
        name, obj, depth = stack.pop()
        if is_tensor(obj):
            yield name, obj, True
            continue
        sub = _children(obj)
        if sub and depth < MAX_DEPTH and contains_tensor(obj, is_tensor, depth):
            stack.extend((f"{name}.{k}", v, depth + 1) for k, v in reversed(sub))
        else:
            yield name, obj, False
