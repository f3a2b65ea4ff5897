"""DataFrames the views show, built from a CheckpointView's records (no tensor bytes read).

The record table's columns are read rather than its records, which a 90k-tensor listing
would otherwise make (half a second) only to be summed here."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from ..natural import natural_if_string_ordered, natural_sorted
from ..plain import to_plain
from ..types import shape_numel
from ..view import CheckpointView
from .numbers import fmt_bytes, fmt_value

if TYPE_CHECKING:
    import pandas as pd

WEIGHT_COLUMNS = ["name", "parameter", "dtype", "shape", "numel", "bytes", "file", "key"]
ARROW = " → "


def shape_text(shape: tuple[int, ...] | list[int] | None) -> str:
    """``192 × 64``, ``scalar`` for a 0-d tensor, "" when unknown (one spelling everywhere)."""
    if shape is None:
        return ""
    return " × ".join(map(str, shape)) if shape else "scalar"


def shape_of_text(text: str) -> list[int] | None:
    """The shape :func:`shape_text` wrote: ``"192 × 64"`` -> ``[192, 64]``, ``"scalar"`` ->
    ``[]``, "" -> None (unknown)."""
    if not text:
        return None
    if text == "scalar":
        return []
    return [int(d) for d in text.split(" × ")]


def folded_names(view: CheckpointView) -> dict[str, tuple[str, str]]:
    """Optimizer state name -> (its parameter's name, the state) for states whose parameter
    is known (the view's slots): ``optimizer/state.3.exp_avg`` ->
    (``model.layers.1.mlp.up_proj.weight``, ``exp_avg``)."""
    out = {}
    for name in view.tensors.column("name"):
        slot = view.slot(name)
        param = view.slot_param(name) if slot is not None else None
        if slot is not None and param is not None:
            out[name] = (param, slot.state)
    return out


def tensor_key(name: str, folded: dict[str, tuple[str, str]]) -> str:
    """What a name filter and the module tree match: the name, or for an optimizer state of
    a known parameter ``<part>/<parameter> → <state>``."""
    hit = folded.get(name)
    if hit is None:
        return name
    part = name[: name.rfind("/") + 1] if "/" in name else ""
    return f"{part}{hit[0]}{ARROW}{hit[1]}"


def filter_weights(df: Any, name: str = "", file: str = "", prefix: bool = False) -> Any:
    """Rows of :func:`weight_map` whose name or key holds ``name`` (case-insensitive); with
    ``prefix`` (a module-tree box), whose name or key starts with it exactly
    (``model.layers.2.``), or is it when it names one tensor; and whose file holds ``file``."""
    if df is None:
        return df
    if name:
        cols = [c for c in ("name", "key") if c in df]
        if prefix and name.endswith((".", "/", ARROW)):
            hit = [df[c].str.startswith(name) for c in cols]
        elif prefix:  # a whole name: that tensor alone
            hit = [df[c] == name for c in cols]
        else:
            hit = [df[c].str.contains(name, regex=False, case=False) for c in cols]
        df = df[hit[0] | hit[1]] if len(hit) > 1 else df[hit[0]]
    if file:
        df = df[df["file"].str.contains(file, regex=False, case=False)]
    return df


def _common_start(texts: list[str]) -> str:
    first, last = min(texts), max(texts)
    i = 0
    while i < min(len(first), len(last)) and first[i] == last[i]:
        i += 1
    return first[:i]


def short_labels(names: list[str]) -> list[str]:
    """Names without the prefix and suffix they all share, never cut inside a number:
    ``model-00001-of-00020.safetensors`` … -> ``00001`` …"""
    if len(names) < 2:
        return list(names)
    pre = _common_start(names)
    while pre and pre[-1].isdigit():
        pre = pre[:-1]
    rev = [n[len(pre) :][::-1] for n in names]
    suf = _common_start(rev)
    while suf and suf[-1].isdigit():
        suf = suf[:-1]
    out = [n[len(pre) : len(n) - len(suf)] for n in names]
    return out if all(out) and len(set(out)) == len(out) else list(names)


def weight_map(view: CheckpointView) -> pd.DataFrame:
    """One row per tensor, in the checkpoint's logical order (natural order when the files
    only kept names sorted as text); optimizer states of known parameters say which."""
    import pandas as pd

    t = view.tensors
    names = list(t.column("name"))
    order = natural_if_string_ordered(list(range(len(names))), names.__getitem__)
    names = [names[i] for i in order]
    folded = folded_names(view)
    texts: dict[tuple[int, ...], tuple[str, int]] = {}  # a few hundred distinct shapes
    shape_col, numel = [], []
    shapes = t.column("shape")
    for i in order:
        shape = tuple(shapes[i])
        known = texts.get(shape)
        if known is None:
            known = texts[shape] = (shape_text(shape), shape_numel(shape))
        shape_col.append(known[0])
        numel.append(known[1])
    if folded:
        parameter = [f"{folded[n][0]}{ARROW}{folded[n][1]}" if n in folded else "" for n in names]
        keys = [tensor_key(n, folded) for n in names]
    else:
        parameter, keys = [""] * len(names), names
    dtypes, nbytes, files = (t.column(c) for c in ("dtype", "nbytes", "file"))
    return pd.DataFrame(
        {
            "name": names,
            "parameter": parameter,
            "dtype": [dtypes[i] for i in order],
            "shape": shape_col,
            "numel": numel,
            "bytes": [nbytes[i] for i in order],
            "file": [files[i] for i in order],
            "key": keys,
        },
        columns=WEIGHT_COLUMNS,
    )


def dtype_breakdown(view: CheckpointView) -> pd.DataFrame:
    """Per dtype: tensors, elements and bytes (largest first)."""
    import pandas as pd

    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    t = view.tensors
    numels = map(math.prod, t.column("shape"))  # 1 for a scalar, as shape_numel
    for dtype, n, nbytes in zip(t.column("dtype"), numels, t.column("nbytes"), strict=True):
        a = acc[dtype]
        a[0] += 1
        a[1] += n
        a[2] += nbytes
    df = pd.DataFrame(
        [(k, *v) for k, v in acc.items()], columns=["dtype", "tensors", "numel", "bytes"]
    )
    return df.sort_values("bytes", ascending=False, ignore_index=True)


def files_frame(view: CheckpointView) -> pd.DataFrame:
    """Every file with its size and the tensors it holds, in natural order of names."""
    import pandas as pd

    count: dict[str, int] = defaultdict(int)
    tensor_bytes: dict[str, int] = defaultdict(int)
    t = view.tensors
    for file, nbytes in zip(t.column("file"), t.column("nbytes"), strict=True):
        count[file] += 1
        tensor_bytes[file] += nbytes
    rows = [
        (f.path, f.nbytes, fmt_bytes(f.nbytes), count.get(f.path, 0), tensor_bytes.get(f.path, 0))
        for f in natural_sorted(view.files, lambda f: f.path)
    ]
    return pd.DataFrame(rows, columns=["file", "bytes", "size", "tensors", "tensor_bytes"])


def model_parameter_count(view: CheckpointView) -> tuple[int, tuple[str, ...]] | None:
    """(elements of the model, where they were counted) — never optimizer moments; None
    when the view holds no model (:meth:`CheckpointView.model_parameter_count`, the count
    ``inspect --json`` gives too)."""
    return view.model_parameter_count()


def parts_frame(view: CheckpointView) -> pd.DataFrame:
    """The parts of a training-state folder (empty for a single checkpoint)."""
    import pandas as pd

    rows = [
        (name, p.family, p.kind, len(p.tensors), sum(r.numel for r in p.tensors), p.total_bytes)
        for name, p in view.parts.items()
    ]
    return pd.DataFrame(rows, columns=["part", "format", "kind", "tensors", "numel", "bytes"])


def values_frame(view: CheckpointView, limit: int = 500) -> pd.DataFrame:
    """Non-tensor leaves (steps, hyperparameters, scheduler fields) as key/value rows, dicts
    opened into one row per key (:func:`key_values`)."""
    import pandas as pd

    rows: list[tuple[str, str]] = []
    for key, v in view.values.items():
        rows += key_values(key, v)
        if len(rows) >= limit:
            break
    return pd.DataFrame(rows[:limit], columns=["key", "value"])


def key_values(key: str, value: Any, depth: int = 4) -> list[tuple[str, str]]:
    """A JSON-like value as (key, value text) rows: dicts opened into ``key.sub`` rows (up to
    ``depth`` levels), lists and scalars as one JSON-like cell (``[0.9, 0.999]``, ``null``)."""
    if isinstance(value, dict) and value and depth > 0:
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            out += key_values(f"{key}.{k}", v, depth - 1)
        return out
    return [(key, fmt_value(_scalar_or_plain(value)))]


def _scalar_or_plain(v: Any) -> Any:
    """A Python scalar as it is (NaN stays a number), anything else as plain data."""
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return to_plain(v)


def param_labels(opt_view: CheckpointView, known_only: bool = True) -> dict[int, str]:
    """id -> the parameter's name (``ParamName.label()``: known names, or with
    ``known_only=False`` also ``ambiguous: a | b`` / ``unknown``); never a guess as a name."""
    info = opt_view.optimizer
    if info is None:
        return {}
    if not info.names:
        return dict(info.param_names)
    return {pid: pn.label() for pid, pn in info.names.items() if pn.known or not known_only}


def optimizer_of(view: CheckpointView) -> tuple[str, CheckpointView] | None:
    """(name prefix, view) of the optimizer in ``view``: itself or one of its parts."""
    if view.optimizer is not None:
        return "", view
    for name, part in view.parts.items():
        if part.optimizer is not None:
            return f"{name}/", part
    return None


def _state_entries(opt_view: CheckpointView) -> dict[tuple[int, str], str]:
    """(id, state) -> entry name, for the view's first optimizer (the one its
    ``OptimizerInfo`` describes; a view holds more only in rare one-view states)."""
    found = opt_view.state_map
    first = next((o.prefix for o in found.optimizers if not o.flat), None)
    return {(s.param_id, s.state): name for name, s in found.slots.items() if s.optimizer == first}


def param_groups_frame(opt_view: CheckpointView) -> pd.DataFrame:
    """One row per param group: size and hyperparameters."""
    import pandas as pd

    assert opt_view.optimizer is not None
    rows = []
    for i, g in enumerate(opt_view.optimizer.param_groups):
        row: dict[str, Any] = {"group": i, "params": len(g.get("params", ()))}
        for k, v in g.items():
            if k != "params":
                plain = _scalar_or_plain(v)
                row[k] = plain if isinstance(plain, int | float | str | bool) else fmt_value(plain)
        rows.append(row)
    return pd.DataFrame(rows)


def optimizer_params_frame(opt_view: CheckpointView, prefix: str = "") -> pd.DataFrame:
    """One row per param id with state: its name, how it was decided (``named``: recorded,
    aligned, ambiguous, unknown), group, states and shape."""
    import pandas as pd

    info = opt_view.optimizer
    assert info is not None
    records = {r.name: r for r in opt_view.tensors}
    labels = param_labels(opt_view, known_only=False)
    how = {pid: pn.how for pid, pn in info.names.items()}
    entries = _state_entries(opt_view)
    rows = []
    for pid in info.state_ids:
        states = info.state_names.get(pid, ())
        shape, dtype, nbytes = "", "", 0
        head = f"state.{pid}."
        for s in states:
            rec = records.get(entries.get((pid, s), ""))
            if rec is None:
                continue
            head = rec.name[: len(rec.name) - len(s)]
            nbytes += rec.nbytes
            if rec.shape and not shape:
                shape, dtype = shape_text(rec.shape), rec.dtype
        rows.append(
            {
                "id": pid,
                "name": labels.get(pid, ""),
                "named": how.get(pid, "known" if pid in info.param_names else "unknown"),
                "group": info.group_of(pid),
                "states": ", ".join(states),
                "shape": shape,
                "dtype": dtype,
                "bytes": nbytes,
                "prefix": f"{prefix}{head}",
            }
        )
    return pd.DataFrame(
        rows,
        columns=["id", "name", "named", "group", "states", "shape", "dtype", "bytes", "prefix"],
    )
