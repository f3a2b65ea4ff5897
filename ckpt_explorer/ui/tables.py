"""DataFrames the views show, built from a CheckpointView's records (no tensor bytes read)."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from ..inspect_report import human_bytes
from ..plain import to_plain
from ..view import CheckpointView, unique_numel
from .numbers import fmt_value

if TYPE_CHECKING:
    import pandas as pd

WEIGHT_COLUMNS = ["name", "dtype", "shape", "numel", "bytes", "file"]
_SPLIT = re.compile(r"[./]")


def shape_text(shape: tuple[int, ...] | list[int] | None) -> str:
    if shape is None:
        return ""
    return " × ".join(map(str, shape)) if shape else "scalar"


def weight_map(view: CheckpointView) -> pd.DataFrame:
    """One row per tensor, in the checkpoint's logical order."""
    import pandas as pd

    t = view.tensors
    return pd.DataFrame(
        {
            "name": [r.name for r in t],
            "dtype": [r.dtype for r in t],
            "shape": [shape_text(r.shape) for r in t],
            "numel": [r.numel for r in t],
            "bytes": [r.nbytes for r in t],
            "file": [r.file for r in t],
        },
        columns=WEIGHT_COLUMNS,
    )


def dtype_breakdown(view: CheckpointView) -> pd.DataFrame:
    """Per dtype: tensors, elements and bytes (largest first)."""
    import pandas as pd

    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in view.tensors:
        a = acc[r.dtype]
        a[0] += 1
        a[1] += r.numel
        a[2] += r.nbytes
    df = pd.DataFrame(
        [(k, *v) for k, v in acc.items()], columns=["dtype", "tensors", "numel", "bytes"]
    )
    return df.sort_values("bytes", ascending=False, ignore_index=True)


def files_frame(view: CheckpointView) -> pd.DataFrame:
    """Every file with its size and the tensors it holds."""
    import pandas as pd

    count: dict[str, int] = defaultdict(int)
    tensor_bytes: dict[str, int] = defaultdict(int)
    for r in view.tensors:
        count[r.file] += 1
        tensor_bytes[r.file] += r.nbytes
    rows = [
        (f.path, f.nbytes, human_bytes(f.nbytes), count.get(f.path, 0), tensor_bytes.get(f.path, 0))
        for f in view.files
    ]
    return pd.DataFrame(rows, columns=["file", "bytes", "size", "tensors", "tensor_bytes"])


MODEL_KINDS = ("model", "adapter")


def model_parameter_count(view: CheckpointView) -> tuple[int, list[str]] | None:
    """(elements of the model tensors, the model parts counted) — the model part(s) of a
    training state only (a DCP state's ``model.*`` items), never optimizer moments; None
    when the view holds no model."""
    if view.family == "torch-dcp" and view.kind == "training_state":  # one folder, no parts
        model = [r for r in view.tensors if r.name.startswith("model.")]
        return (unique_numel(model), ["model.*"]) if model else None
    if view.parts:
        parts = [(n, p) for n, p in view.parts.items() if p.detection.kind in MODEL_KINDS]
    else:
        parts = [("", view)] if view.detection.kind in MODEL_KINDS else []
    if not parts:
        return None
    return unique_numel(r for _, p in parts for r in p.tensors), [n for n, _ in parts if n]


def parts_frame(view: CheckpointView) -> pd.DataFrame:
    """The parts of a training-state folder (empty for a single checkpoint)."""
    import pandas as pd

    rows = [
        (name, p.family, p.kind, len(p.tensors), sum(r.numel for r in p.tensors), p.total_bytes)
        for name, p in view.parts.items()
    ]
    return pd.DataFrame(rows, columns=["part", "format", "kind", "tensors", "numel", "bytes"])


def values_frame(view: CheckpointView, limit: int = 500) -> pd.DataFrame:
    """Non-tensor leaves (steps, hyperparameters, scheduler fields) as short text."""
    import pandas as pd

    rows = [(key, fmt_value(to_plain(v))) for key, v in list(view.values.items())[:limit]]
    return pd.DataFrame(rows, columns=["key", "value"])


def module_tree(view: CheckpointView, max_depth: int = 4, max_nodes: int = 800) -> pd.DataFrame:
    """Tensors grouped by name prefix: ``id, parent, label, bytes, tensors`` for a treemap.

    Names are split at ``.`` and ``/``; a node's id is the name's prefix up to that point (so
    it works as a name filter). The depth is reduced until the tree has at most ``max_nodes``
    nodes, so 100k tensors stay a readable chart. An optimizer state id's node is labelled
    with its parameter's name where it is known (``3 · layers.0.weight``).
    """
    import pandas as pd

    names = optimizer_node_labels(view)
    depth = max_depth
    while True:
        nodes: dict[str, list[Any]] = {}
        for r in view.tensors:
            cuts = [m.start() for m in _SPLIT.finditer(r.name)] + [len(r.name)]
            parts = _SPLIT.split(r.name)
            n = min(depth, len(parts))
            parent = ""
            for i in range(n):
                node_id = r.name[: cuts[i]]
                label = parts[i]
                if i == n - 1 and len(parts) > depth and depth > 1:
                    node_id, label = node_id + "…", label + "…"
                node = nodes.get(node_id)
                if node is None:
                    node = nodes[node_id] = [node_id, parent, names.get(node_id, label), 0, 0]
                node[3] += r.nbytes
                node[4] += 1
                parent = node_id
        if len(nodes) <= max_nodes or depth <= 1:
            break
        depth -= 1
    return pd.DataFrame(list(nodes.values()), columns=["id", "parent", "label", "bytes", "tensors"])


def optimizer_node_labels(view: CheckpointView) -> dict[str, str]:
    """Tree node id ``<prefix>state.<id>`` -> ``<id> · <name>`` for ids whose name is known."""
    found = optimizer_of(view)
    if found is None:
        return {}
    prefix, opt_view = found
    assert opt_view.optimizer is not None
    return {
        f"{prefix}state.{pid}": f"{pid} · {name}" for pid, name in param_labels(opt_view).items()
    }


def param_labels(opt_view: CheckpointView, known_only: bool = True) -> dict[int, str]:
    """id -> the parameter's name (``ParamName.label()``: known names, or with
    ``known_only=False`` also ``ambiguous: a | b`` / ``unknown``); never a guess as a name."""
    info = opt_view.optimizer
    if info is None:
        return {}
    if not info.names:
        return dict(info.param_names)
    return {pid: pn.label() for pid, pn in info.names.items() if pn.known or not known_only}


def prefix_of(node_id: str) -> str:
    """The name filter a tree node stands for (``layers.0…`` -> ``layers.0``)."""
    return node_id.rstrip("…")


def optimizer_of(view: CheckpointView) -> tuple[str, CheckpointView] | None:
    """(name prefix, view) of the optimizer in ``view``: itself or one of its parts."""
    if view.optimizer is not None:
        return "", view
    for name, part in view.parts.items():
        if part.optimizer is not None:
            return f"{name}/", part
    return None


def param_groups_frame(opt_view: CheckpointView) -> pd.DataFrame:
    """One row per param group: size and hyperparameters."""
    import pandas as pd

    assert opt_view.optimizer is not None
    rows = []
    for i, g in enumerate(opt_view.optimizer.param_groups):
        row: dict[str, Any] = {"group": i, "params": len(g.get("params", ()))}
        for k, v in g.items():
            if k != "params":
                plain = to_plain(v)
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
    rows = []
    for pid in info.state_ids:
        states = info.state_names.get(pid, ())
        shape, dtype, nbytes = "", "", 0
        for s in states:
            rec = records.get(f"state.{pid}.{s}")
            if rec is None:
                continue
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
                "prefix": f"{prefix}state.{pid}.",
            }
        )
    return pd.DataFrame(
        rows,
        columns=["id", "name", "named", "group", "states", "shape", "dtype", "bytes", "prefix"],
    )
