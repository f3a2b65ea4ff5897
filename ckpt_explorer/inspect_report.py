"""What `inspect` shows: a JSON-able summary of a view and its plain-text rendering."""

from __future__ import annotations

from collections import Counter
from typing import Any

from .natural import natural_if_string_ordered
from .plain import to_plain
from .readable import human_bytes
from .record_table import record_column
from .types import OptimizerInfo, TensorRecord
from .view import CheckpointView


def tensor_entry(r: TensorRecord) -> dict[str, Any]:
    return {
        "name": r.name,
        "dtype": r.dtype,
        "shape": list(r.shape),
        "nbytes": r.nbytes,
        "file": r.file,
        "offset": r.offset,
    }


def inspect_report(
    view: CheckpointView, include_parts: bool = True, tensors: bool = True
) -> dict[str, Any]:
    """The ``inspect --json`` object: path, format, kind, evidence, files, tensors, parts, ...
    (``tensors=False`` leaves the list empty, for a writer that streams it: cli.py)."""
    report: dict[str, Any] = {
        "path": str(view.path),
        "format": view.family,
        "kind": view.kind,
        "detail": view.detection.detail,
        "evidence": list(view.detection.evidence),
        "files": [{"path": f.path, "bytes": f.nbytes} for f in view.files],
        "total_bytes": view.total_bytes,
        "tensor_count": len(view.tensors),
        "parameter_count": parameter_count(view),  # tied aliases of one storage counted once
        "dtypes": dict(Counter(record_column(view.tensors, "dtype"))),
        "tensors": [tensor_entry(r) for r in view.tensors] if tensors else [],
        "values": {k: to_plain(v) for k, v in view.values.items()},
        "warnings": list(view.warnings),
    }
    if view.optimizer is not None:
        report["optimizer"] = optimizer_entry(view.optimizer)
    from .fit.written_by import view_clues

    report["written_layout"] = [c.to_json() for c in view_clues(view)]
    report["loaders"] = loaders_entry(view)
    if include_parts and view.parts:
        report["parts"] = {}
        for name, part in view.parts.items():
            entry: dict[str, Any] = {
                "path": str(part.path),
                "format": part.family,
                "kind": part.kind,
                "tensor_count": len(part.tensors),
                "bytes": part.total_bytes,
            }
            if part.optimizer is not None:
                entry["optimizer"] = optimizer_entry(part.optimizer)
            report["parts"][name] = entry
    return report


def loaders_entry(view: CheckpointView) -> dict[str, Any] | None:
    """The loader table of a local checkpoint (``loadable.loader_table``), else None."""
    if not _local(view):
        return None
    from .loadable import loader_table

    return loader_table(view.path).to_json()


def _local(view: CheckpointView) -> bool:
    from .loadable import has_table

    return has_table(view.path)


def parameter_count(view: CheckpointView) -> int | None:
    """Elements of the model only (never optimizer moments, RNG or run state): see
    :meth:`CheckpointView.model_parameter_count`; None when the checkpoint holds no model."""
    counted = view.model_parameter_count()
    return counted[0] if counted is not None else None


def optimizer_entry(opt: OptimizerInfo) -> dict[str, Any]:
    """Groups, ids and the parameter behind each id with how it was decided."""
    return {
        "param_groups": to_plain(list(opt.param_groups)),
        "state_ids": list(opt.state_ids),
        "param_names": {str(k): v for k, v in opt.param_names.items()},
        "name_source": opt.name_source,
        "names": {
            str(k): {"name": n.name, "how": n.how, "candidates": list(n.candidates)}
            for k, n in opt.names.items()
        },
        "names_by_how": dict(Counter(n.how for n in opt.names.values())),
        "inconsistencies": list(opt.inconsistencies),
    }


def _optimizer_lines(label: str, opt: OptimizerInfo, limit: int | None) -> list[str]:
    lines = [
        "",
        f"optimizer{label}  {len(opt.param_groups)} group(s), {len(opt.state_ids)} param id(s) "
        "with state",
    ]
    for i, g in enumerate(opt.param_groups):
        hyper = ", ".join(f"{k}={to_plain(v)}" for k, v in g.items() if k != "params")
        count = f"{len(g['params'])} params" if "params" in g else "params not recorded"
        lines.append(f"  group {i}: {count}; {hyper}")
    if opt.names:
        counts = Counter(n.how for n in opt.names.values())
        lines.append(
            "  parameter names: "
            + ", ".join(f"{n} {how}" for how, n in sorted(counts.items()))
            + (f" (order: {opt.name_source})" if opt.name_source else "")
        )
    for msg in opt.inconsistencies:
        lines.append(f"  inconsistent: {msg}")
    items = sorted(opt.names.items())
    shown = items if limit is None else items[:limit]
    if shown and any(n.how != "unknown" for _, n in shown):
        lines += [
            "  " + row
            for row in _table(
                [[str(pid), n.how, n.label()] for pid, n in shown], ["id", "how", "parameter"]
            )
        ]
        if len(shown) < len(items):
            lines.append(f"  ... {len(items) - len(shown)} more ids (use --all)")
    return lines


def _table(rows: list[list[str]], headers: list[str]) -> list[str]:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return out


def format_inspect(view: CheckpointView, limit: int | None = 40) -> str:
    """A readable summary table of a view."""
    lines = [
        f"path     {view.path}",
        f"format   {view.family}"
        + (f" — {view.detection.detail}" if view.detection.detail else ""),
        f"kind     {view.kind}",
        f"files    {len(view.files)} ({human_bytes(view.total_bytes)})",
        f"tensors  {len(view.tensors)} ({view.element_count:,} elements, "
        f"{human_bytes(view.unique_tensor_bytes)})",
        "evidence",
    ]
    lines += [f"  - {e}" for e in view.detection.evidence]
    for w in view.warnings:
        lines.append(f"warning  {w}")
    from .fit.written_by import view_clues

    lines += [f"layout   {c.fact} {c.value} ({c.evidence})" for c in view_clues(view)]
    if view.parts:
        lines.append("")
        lines += _table(
            [
                [n, p.family, p.kind, str(len(p.tensors)), human_bytes(p.total_bytes)]
                for n, p in view.parts.items()
            ],
            ["part", "format", "kind", "tensors", "size"],
        )
    if view.optimizer is not None:
        lines += _optimizer_lines("", view.optimizer, limit)
    for name, part in view.parts.items():
        if part.optimizer is not None:
            lines += _optimizer_lines(f" ({name})", part.optimizer, limit)
    # the dashboard's order: the checkpoint's own, natural where the files kept names sorted
    # as text (layers.2 before layers.10)
    ordered = natural_if_string_ordered(list(view.tensors), lambda r: r.name)
    shown = ordered if limit is None else ordered[:limit]
    if shown:
        lines.append("")
        lines += _table(
            [
                [
                    r.name,
                    r.dtype,
                    "x".join(map(str, r.shape)) or "scalar",
                    human_bytes(r.nbytes),
                    r.file,
                ]
                for r in shown
            ],
            ["name", "dtype", "shape", "size", "file"],
        )
        if len(shown) < len(view.tensors):
            lines.append(f"... {len(view.tensors) - len(shown)} more (use --all)")
    if _local(view):
        from .loadable import loader_table

        lines += ["", *loader_table(view.path).lines()]
    scalars = {k: v for k, v in view.values.items() if isinstance(to_plain(v), int | float | str)}
    if scalars and not view.tensors:
        lines.append("")
        lines += _table(
            [[k, str(to_plain(v))] for k, v in list(scalars.items())[:40]], ["value", ""]
        )
    return "\n".join(lines)
