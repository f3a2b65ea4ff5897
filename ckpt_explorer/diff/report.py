"""DiffResult: the rows of a diff, its summary, aggregates for plots, DataFrame and JSON."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..natural import natural_text_key
from .figure_layout import COLUMNS
from .quant_budget import BEYOND, EXACT, UNPROVEN, VERDICTS, WITHIN

# The row kinds this module names; engine.py imports the same names (a list, not logic).
from .rows import (
    CHANGED,
    DTYPE_MISMATCH,
    EQUAL,
    IDENTICAL,
    NOT_COMPARED,
    ONLY_IN_A,
    ONLY_IN_B,
    SAME,
    SHAPE_MISMATCH,
    STATUSES,
    TensorDiff,
    ValueDiff,
)

if TYPE_CHECKING:
    import pandas as pd

COMPARED = (IDENTICAL, EQUAL, CHANGED, DTYPE_MISMATCH)


@dataclass
class DiffResult:
    """Everything a diff found.

    Attributes:
        tensors: one row per aligned tensor name, in A's on-disk order, then names only in B.
        values: one row per non-tensor value key.
        cancelled: True when the run stopped early (remaining rows are ``not_compared``).
        options: a, b, atol, rtol, device, nproc, chunk_bytes, seconds.
    """

    tensors: list[TensorDiff]
    values: list[ValueDiff] = field(default_factory=list)
    cancelled: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    # ---- verdict ------------------------------------------------------------------------
    @property
    def equal(self) -> bool:
        """Every tensor identical or within tolerance, nothing missing, no state value changed
        (file metadata/config values are informational), and the run was not cancelled."""
        if self.cancelled:
            return False
        if any(r.status not in SAME for r in self.tensors):
            return False
        return all(v.status == "equal" or v.informational for v in self.values)

    @property
    def is_export(self) -> bool:
        """An export (GGUF) compared with its source: rows carry storage-type verdicts."""
        return any(r.verdict is not None for r in self.tensors)

    @property
    def export_verdict(self) -> str:
        """An export diff's verdict: ``faithful`` (proven), ``not_faithful`` (a tensor beyond
        its budget, unpaired, misshapen, a value changed, or the run cancelled) or
        ``cannot_tell`` (nothing found wrong, but some tensors exceed a budget that does not
        bound their writer, e.g. weights moved before rounding by GPTQ)."""
        if self.faithful:
            return "faithful"
        unproven = [r for r in self.tensors if r.verdict == UNPROVEN]
        if unproven and self._faithful(allowed=(EXACT, WITHIN, UNPROVEN)):
            return "cannot_tell"
        return "not_faithful"

    @property
    def faithful(self) -> bool:
        """An export diff: every row exact or within its budget, every source tensor paired,
        the run not cancelled."""
        return self._faithful(allowed=(EXACT, WITHIN))

    def _faithful(self, allowed: tuple[str, ...]) -> bool:
        if self.cancelled or not self.is_export:
            return False
        return all(r.verdict in allowed for r in self.tensors if r.status in COMPARED) and (
            not any(r.status == SHAPE_MISMATCH for r in self.tensors)
            and not any(r.status == self._only_in_source for r in self.tensors)
            and all(v.status == "equal" or v.informational for v in self.values)
        )

    @property
    def _only_in_source(self) -> str:
        return ONLY_IN_B if self.options.get("export") == "a" else ONLY_IN_A

    def export_rows(self) -> list[TensorDiff]:
        """Rows with a verdict, worst first: beyond budget, then within, then exact; each by
        its error / budget ratio, largest first."""
        rows = [r for r in self.tensors if r.verdict is not None]
        return sorted(rows, key=_export_key)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for r in self.tensors:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def summary(self) -> dict[str, Any]:
        c = self.counts()
        vals = [v for v in self.values if not v.informational]
        return {
            "equal": self.equal,
            "cancelled": self.cancelled,
            "tensors": len(self.tensors),
            "identical": c[IDENTICAL],
            "compared": sum(c[s] for s in COMPARED),
            "changed": c[CHANGED],
            "equal_within_tolerance": c[EQUAL],
            "shape_mismatch": c[SHAPE_MISMATCH],
            "dtype_mismatch": c[DTYPE_MISMATCH],
            "only_in_a": c[ONLY_IN_A],
            "only_in_b": c[ONLY_IN_B],
            "not_compared": c[NOT_COMPARED],
            "by_status": {k: v for k, v in c.items() if v},
            "values_changed": sum(v.status == "changed" for v in vals),
            "values_only_in_a": sum(v.status == "only_in_a" for v in vals),
            "values_only_in_b": sum(v.status == "only_in_b" for v in vals),
            **({"export": self._export_summary()} if self.is_export else {}),
            "bytes_compared": sum(
                r.nbytes_a + r.nbytes_b for r in self.tensors if r.status in COMPARED
            ),
        }

    def _export_summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"faithful": self.faithful, "verdict": self.export_verdict}
        for v in VERDICTS:
            out[v] = sum(r.verdict == v for r in self.tensors)
        out["unpaired"] = sum(r.status in (ONLY_IN_A, ONLY_IN_B) for r in self.tensors)
        return out

    # ---- tables -------------------------------------------------------------------------
    def to_frame(self) -> pd.DataFrame:
        """One row per tensor (columns as in :class:`TensorDiff`)."""
        import pandas as pd

        cols = list(TensorDiff("", "").to_dict())
        return pd.DataFrame([r.to_dict() for r in self.tensors], columns=cols)

    def values_dataframe(self) -> pd.DataFrame:
        import pandas as pd

        cols = ["key", "status", "a", "b", "key_b", "informational"]
        return pd.DataFrame([v.to_dict() for v in self.values], columns=cols)

    def by_layer(self) -> list[dict[str, Any]]:
        """Per (part, optimizer state, layer index): ready for a per-layer chart."""
        return _aggregate(self.tensors, lambda r: (r.part, r.state or "", r.layer), "layer")

    def by_module(self) -> list[dict[str, Any]]:
        """Per (part, optimizer state, module prefix)."""
        return _aggregate(self.tensors, lambda r: (r.part, r.state or "", r.module), "module")

    def changed(self) -> list[TensorDiff]:
        """Rows that differ, largest relative L2 first (undefined rel_l2 last)."""
        rows = [r for r in self.tensors if r.status not in SAME]
        return sorted(rows, key=_rel_key)

    # ---- JSON ---------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return _json_safe(
            {
                "a": self.options.get("a"),
                "b": self.options.get("b"),
                "options": self.options,
                "summary": self.summary(),
                "tensors": [r.to_dict() for r in self.tensors],
                "values": [v.to_dict() for v in self.values],
                "by_layer": self.by_layer(),
                "by_module": self.by_module(),
            }
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DiffResult:
        rows = [TensorDiff.from_dict(d) for d in data.get("tensors", [])]
        for i, r in enumerate(rows):
            r.order = i
        return cls(
            rows,
            [ValueDiff.from_dict(d) for d in data.get("values", [])],
            bool(data.get("summary", {}).get("cancelled", False)),
            dict(data.get("options", {})),
        )

    def format_text(self, limit: int = 40) -> str:
        return format_result(self, limit)


def _export_key(r: TensorDiff) -> tuple[int, float, str]:
    rank = VERDICTS.index(r.verdict) if r.verdict in VERDICTS else len(VERDICTS)
    return (rank, -(r.budget_ratio or 0.0), natural_text_key(r.name))


def _rel_key(r: TensorDiff) -> tuple[int, float, str]:
    """Largest relative L2 first; ties in natural order of names (layers.2 before 10)."""
    if r.rel_l2 is None:
        return (1, 0.0, natural_text_key(r.name))
    return (0, -r.rel_l2, natural_text_key(r.name))


def _aggregate(rows: Iterable[TensorDiff], key: Any, label: str) -> list[dict[str, Any]]:
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        if r.status not in COMPARED:
            continue
        k = key(r)
        g = groups.get(k)
        if g is None:
            g = groups[k] = {
                "part": k[0],
                "state": k[1] or None,
                label: k[2],
                "tensors": 0,
                "changed": 0,
                "numel": 0,
                "max_abs": 0.0,
                "_sum_abs": 0.0,
                "max_rel_l2": 0.0,
            }
        g["tensors"] += 1
        g["changed"] += r.status not in SAME
        g["numel"] += r.numel
        g["max_abs"] = max(g["max_abs"], r.max_abs or 0.0)
        g["_sum_abs"] += (r.mean_abs or 0.0) * r.numel
        if r.rel_l2 is not None:
            g["max_rel_l2"] = max(g["max_rel_l2"], r.rel_l2)
    out = []
    for g in groups.values():
        g["mean_abs"] = g.pop("_sum_abs") / g["numel"] if g["numel"] else 0.0
        out.append(g)
    if label == "layer":
        out.sort(key=lambda g: (g["part"], g["state"] or "", g["layer"] is None, g["layer"] or 0))
    return out


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return obj


def _short(v: Any, limit: int = 100) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def format_result(result: DiffResult, limit: int = 40) -> str:
    s = result.summary()
    lines = [
        f"A: {result.options.get('a')}",
        f"B: {result.options.get('b')}",
        f"verdict: {'EQUAL' if s['equal'] else 'DIFFERENT'}"
        + (" (cancelled: partial result)" if s["cancelled"] else "")
        + f"  (atol={result.options.get('atol', 0.0)}, rtol={result.options.get('rtol', 0.0)})",
        f"tensors: {s['tensors']}  identical {s['identical']}  equal within tolerance "
        f"{s['equal_within_tolerance']}  changed {s['changed']}  shape mismatch "
        f"{s['shape_mismatch']}  dtype mismatch {s['dtype_mismatch']}  only in A "
        f"{s['only_in_a']}  only in B {s['only_in_b']}"
        + (f"  not compared {s['not_compared']}" if s["not_compared"] else ""),
    ]
    if result.is_export:
        lines[2] = "verdict: " + result.export_verdict.replace("_", " ").upper()
        lines[2] += " (an export against its source: each tensor within what its type costs)"
        lines += _format_export(result, limit)
        return "\n".join(lines + _format_values(result, metadata=False))
    changed = result.changed()
    if changed:
        lines += ["", f"differing tensors ({len(changed)}), largest relative L2 first:"]
        heads = "".join(f" {f.column.header:>9}" for f in COLUMNS if f.column)
        lines.append(f"  {'status':15}{heads}  name")
        for r in changed[:limit]:
            name = r.name + (f" -> {r.name_b}" if r.name_b else "")
            if r.param and (r.param not in r.name or r.param_b):  # not said twice
                name += f"  [{r.param}" + (f" | B: {r.param_b}" if r.param_b else "") + "]"
            cells = "".join(f" {f.column.text(r.figure(f.name)):>9}" for f in COLUMNS if f.column)
            lines.append(f"  {r.status:15}{cells}  {name}")
            if r.status == SHAPE_MISMATCH:
                lines.append(f"  {'':15} shapes {r.shape_a} vs {r.shape_b}")
            elif r.status == DTYPE_MISMATCH:
                lines.append(f"  {'':15} dtypes {r.dtype_a} vs {r.dtype_b}")
            if r.nan_a or r.nan_b or r.inf_a or r.inf_b:
                lines.append(f"  {'':15} NaN {r.nan_a}/{r.nan_b}  Inf {r.inf_a}/{r.inf_b} (A/B)")
        if len(changed) > limit:
            lines.append(f"  ... {len(changed) - limit} more (use --json for all)")
    return "\n".join(lines + _format_values(result))


def _format_export(result: DiffResult, limit: int) -> list[str]:
    e = result.summary()["export"]
    lines = [
        f"export: exact {e[EXACT]}  "
        f"within budget {e[WITHIN]}  beyond budget {e[BEYOND]}  unpaired {e['unpaired']}"
        + (f"  cannot tell {e[UNPROVEN]}" if e[UNPROVEN] else ""),
        "",
        "tensors, worst first (err/budget: the largest error over what the type allows):",
        f"  {'verdict':14} {'type':6} {'err/budget':>10} {'max|a-b|':>9} {'budget':>9}  name",
    ]
    rows = result.export_rows()
    for r in rows[:limit]:
        lines.append(
            f"  {r.verdict or '':14} {r.quant or '':6} {_fmt(r.budget_ratio):>10} "
            f"{_fmt(r.max_abs):>9} {_fmt(r.budget):>9}  {r.name}  <- {r.export_tensor}"
        )
    if len(rows) > limit:
        lines.append(f"  ... {len(rows) - limit} more (use --json for all)")
    unpaired = [r for r in result.tensors if r.status in (ONLY_IN_A, ONLY_IN_B, SHAPE_MISMATCH)]
    if unpaired:
        lines += ["", "not paired:"]
        for r in unpaired[:limit]:
            lines.append(f"  {r.status:15} {r.name}: {r.note or '-'}")
    return lines


def _format_values(result: DiffResult, metadata: bool = True) -> list[str]:
    lines: list[str] = []
    vals = [v for v in result.values if v.status != "equal" and (metadata or not v.informational)]
    if vals:
        lines += ["", "values that differ:"]
        for v in vals:
            tag = " (metadata)" if v.informational else ""
            if v.status == "changed":
                lines.append(f"  {v.key}: {_short(v.a)} -> {_short(v.b)}{tag}")
            else:
                side = v.a if v.status == "only_in_a" else v.b
                lines.append(f"  {v.key}: {v.status} ({_short(side)}){tag}")
    return lines
