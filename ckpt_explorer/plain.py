"""Turn the inert objects readers produce into JSON-able values for reports."""

from __future__ import annotations

import itertools
import math
from typing import Any

from .io.safe_pickle import LazyTensor, OpaqueObject

MAX_ITEMS = 64
MAX_DEPTH = 12


def to_plain(obj: Any, depth: int = 0) -> Any:
    """A JSON-able rendering of ``obj``: containers recursed (bounded), others summarised."""
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if depth >= MAX_DEPTH:
        return f"<{type(obj).__name__} nested too deep>"
    if isinstance(obj, LazyTensor):
        return {"tensor": str(obj.dtype).removeprefix("torch."), "shape": list(obj.shape)}
    if isinstance(obj, OpaqueObject):
        out: dict[str, Any] = {"opaque": obj.qualified_name}
        if obj.args:
            out["args"] = to_plain(list(obj.args), depth + 1)
        if obj.state is not None:
            out["state"] = to_plain(obj.state, depth + 1)
        if obj.items:
            out["items"] = to_plain(obj.items, depth + 1)
        return out
    if isinstance(obj, type) and issubclass(obj, OpaqueObject):
        return {"opaque_class": obj.__qualified_name__}
    if isinstance(obj, type):  # a class named in the pickle, e.g. numpy.ndarray
        return f"<class {obj.__module__}.{obj.__qualname__}>"
    if isinstance(obj, dict):
        items = itertools.islice(obj.items(), MAX_ITEMS)  # a lazy dict makes only these
        out = {str(k): to_plain(v, depth + 1) for k, v in items}
        if len(obj) > MAX_ITEMS:
            out["..."] = f"{len(obj) - MAX_ITEMS} more"
        return out
    if isinstance(obj, list | tuple | set | frozenset):
        seq = list(obj)
        body = [to_plain(v, depth + 1) for v in seq[:MAX_ITEMS]]
        if len(seq) > MAX_ITEMS:
            body.append(f"... {len(seq) - MAX_ITEMS} more")
        return body
    if isinstance(obj, bytes | bytearray):
        return f"<{len(obj)} bytes>"
    if hasattr(obj, "dtype") and hasattr(obj, "shape"):  # torch.Tensor / numpy array
        shape = list(getattr(obj, "shape", ()))
        numel = 1
        for d in shape:
            numel *= int(d)
        if numel == 1:
            try:
                return to_plain(obj.item(), depth + 1)
            except (ValueError, RuntimeError, TypeError):
                pass
        return {"tensor": str(obj.dtype).removeprefix("torch."), "shape": shape}
    if isinstance(obj, complex):
        return str(obj)
    return str(obj)
