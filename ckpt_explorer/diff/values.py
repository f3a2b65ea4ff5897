"""Compare the non-tensor values of two checkpoints (hyperparameters, scheduler, run state)."""

from __future__ import annotations

import re
from typing import Any

from ..view import CheckpointView
from .align import align_names
from .rows import ValueDiff

# File metadata and model config: shown, but they do not make two checkpoints differ.
INFORMATIONAL = re.compile(
    r"(^|/)(__metadata__|index\.metadata|config\.json|generation_config\.json|"
    r"adapter_config\.json)($|[./])"
)
MAX_FLATTEN_DEPTH = 6


def _is_scalar_list(v: Any) -> bool:
    return isinstance(v, list) and all(not isinstance(x, dict | list) for x in v)


def flatten_values(values: dict[str, Any]) -> dict[str, Any]:
    """Plain (JSON-able) values keyed by dotted names; dicts and lists of dicts are opened,
    so ``optimizer/param_groups`` becomes ``optimizer/param_groups.0.lr`` and friends."""
    from ..plain import to_plain

    out: dict[str, Any] = {}

    def walk(key: str, v: Any, depth: int) -> None:
        if depth < MAX_FLATTEN_DEPTH and isinstance(v, dict) and v and "opaque" not in v:
            for k, sub in v.items():
                walk(f"{key}.{k}", sub, depth + 1)
        elif depth < MAX_FLATTEN_DEPTH and isinstance(v, list) and v and not _is_scalar_list(v):
            for i, sub in enumerate(v):
                walk(f"{key}.{i}", sub, depth + 1)
        else:
            out[key] = v

    for key, value in values.items():
        walk(key, to_plain(value), 0)
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (type(a) is type(b) and a == b)
    return bool(a == b)


def compare_values(
    view_a: CheckpointView, view_b: CheckpointView, rename: dict[str, str] | None = None
) -> list[ValueDiff]:
    """One :class:`ValueDiff` per value key, in A's order then B's."""
    va, vb = flatten_values(view_a.values), flatten_values(view_b.values)
    rows = []
    for p in align_names(list(va), list(vb), rename):
        key = p.a if p.a is not None else p.b
        assert key is not None
        info = bool(INFORMATIONAL.search(key))
        if p.a is None:
            rows.append(ValueDiff(key, "only_in_b", None, vb[key], informational=info))
        elif p.b is None:
            rows.append(ValueDiff(key, "only_in_a", va[key], None, informational=info))
        else:
            status = "equal" if _same(va[p.a], vb[p.b]) else "changed"
            key_b = p.b if p.b != p.a else None
            rows.append(ValueDiff(key, status, va[p.a], vb[p.b], key_b, info))
    return rows
