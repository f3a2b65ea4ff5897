"""A GGUF export diffed against an HF model is compared as the HF model it was made from.

When one side is a GGUF file and the other a model, the GGUF side is replaced by its HF view
(:func:`..readers.gguf.hf.hf_view`: GGUF names mapped to HF names through the ``gguf``
package's name map, the converter's Q/K permutation, expert stacking and norm offsets undone),
so the engine compares each HF tensor with what the export holds for it. After the engine's
figures, :func:`attach_budgets` gives every paired row what its storage type should cost and
a verdict (:mod:`.quant_budget`), and every unpaired row the reason.
"""

from __future__ import annotations

from typing import Any

from ..readers.gguf.hf import ExportSource, export_of, export_values, hf_view, is_gguf
from ..readers.gguf.values import Dequantized
from ..view import CheckpointView
from .export_config import config_checks
from .kquant_rule import LAYOUTS
from .quant_budget import budget
from .quant_export import attach_quant_budgets, quant_checks
from .rows import ONLY_IN_A, ONLY_IN_B, TensorDiff, ValueDiff


def export_sides(a: CheckpointView, b: CheckpointView) -> tuple[CheckpointView, CheckpointView]:
    """``(a, b)`` with a GGUF side seen under the other side's HF names."""
    if is_gguf(b) and not is_gguf(a) and a.kind == "model":
        return a, hf_view(b, a)
    if is_gguf(a) and not is_gguf(b) and b.kind == "model":
        return hf_view(a, b), b
    return a, b


def attach_budgets(
    rows: list[TensorDiff],
    view_a: CheckpointView,
    view_b: CheckpointView,
) -> str | None:
    """Fill ``quant``, ``verdict``, ``budget``, ``budget_ratio``, ``export_tensor`` and
    ``note`` of the rows of an export diff; return which side is the export (``"a"``,
    ``"b"``; None for other diffs, whose rows are left as they are)."""
    side_name = attach_quant_budgets(rows, view_a, view_b)
    for source, side, export_is_a in ((view_a, view_b, False), (view_b, view_a, True)):
        found = export_of(side)
        if found is None:
            continue
        export, pairing = found
        side_name = "a" if export_is_a else "b"
        only_source, only_export = (ONLY_IN_B, ONLY_IN_A) if export_is_a else (ONLY_IN_A, ONLY_IN_B)
        for row in rows:
            if row.status == only_source:
                row.note = pairing.only_hf.get(row.name)
                continue
            if row.status == only_export:
                row.note = pairing.only_gguf.get(row.name)
                continue
            other = row.name_b or row.name
            key, name = (row.name, other) if export_is_a else (other, row.name)
            src = pairing.sources.get(key)
            if src is None or row.max_abs is None:
                continue
            expected = source.load(name)
            if src.forward is not None:
                expected = src.forward(expected)
            figures = budget(src.ggml_type, expected, export_values(export, src), _raw(export, src))
            row.quant = src.ggml_type
            row.verdict = figures.verdict
            row.budget = figures.max_budget
            row.budget_ratio = figures.ratio
            row.export_tensor = src.describe()
    return side_name


def _raw(export: CheckpointView, src: ExportSource) -> dict[str, Any] | None:
    """A K-quant tensor's own bytes (its expert's), whose scales its budget is read from."""
    if src.ggml_type not in LAYOUTS:
        return None
    load = export.record(src.gguf).read_values
    if not isinstance(load, Dequantized) or load.byteorder != "little":
        return None
    import numpy as np

    raw = np.frombuffer(load.mapped.byte_view(load.offset, load.nbytes), dtype=np.uint8)
    if src.expert is not None:
        raw = raw.reshape(load.shape[0], -1)[src.expert]
    return {"raw": raw}


def export_checks(view_a: CheckpointView, view_b: CheckpointView) -> list[ValueDiff]:
    """The export's metadata against the source's config.json (:mod:`.export_config`)."""
    quantized = quant_checks(view_a, view_b)
    if quantized:
        return quantized
    for source, side in ((view_a, view_b), (view_b, view_a)):
        found = export_of(side)
        if found is not None:
            return config_checks(source, found[0])
    return []
