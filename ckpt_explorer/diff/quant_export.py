"""A quantized-safetensors export diffed against the HF model it was quantized from.

The export's view (:mod:`..readers.quantized`) already lists each quantized weight under the
HF name it encodes, dequantized, so the engine pairs it by name. Here every compared row gets
what its storage should cost (:mod:`.quant_budget`, the scheme's rule with the export's own
parameters; a float copy: the rounding to its dtype) and a verdict; the config-vs-files
findings become value rows that count in the verdict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..readers.quantized.folder import QUANT_KEY, part_loader, quant_weights
from ..view import CheckpointView
from .quant_budget import BEYOND, FLOATS, UNPROVEN, Budget, budget, scheme_allowance
from .quant_evidence import clipping, describe, evidence
from .rows import ONLY_IN_A, ONLY_IN_B, TensorDiff, ValueDiff

if TYPE_CHECKING:
    import torch

    from ..readers.quantized.parts import QuantWeight

FLOAT_TYPES = {dtype: name for name, (dtype, _, _) in FLOATS.items()}


def _sides(
    view_a: CheckpointView, view_b: CheckpointView
) -> tuple[CheckpointView, CheckpointView, bool] | None:
    """(source, export, export is a) when exactly one side is a quantized export."""
    if quant_weights(view_b) is not None and quant_weights(view_a) is None:
        return view_a, view_b, False
    if quant_weights(view_a) is not None and quant_weights(view_b) is None:
        return view_b, view_a, True
    return None


def attach_quant_budgets(
    rows: list[TensorDiff], view_a: CheckpointView, view_b: CheckpointView
) -> str | None:
    """Fill the export columns of each compared row; return the export's side or None."""
    found = _sides(view_a, view_b)
    if found is None:
        return None
    source, export, export_is_a = found
    weights = quant_weights(export) or {}
    awq_moved = any(w.scheme == "awq" for w in weights.values())
    for row in rows:
        if row.status in (ONLY_IN_A, ONLY_IN_B) or row.max_abs is None:
            continue
        other = row.name_b or row.name
        src_name, exp_name = (other, row.name) if export_is_a else (row.name, other)
        w = weights.get(exp_name)
        if w is not None:
            params = {k: v for k, v in w.params.items() if k != "moved_by"} | {"bits": w.bits}
            if w.params.get("double_quant") or w.params.get("moved_by"):
                params["approximate"] = True
            kind, tensor = w.storage_type, ", ".join(w.parts.values())
        else:
            kind = FLOAT_TYPES.get(export.record(exp_name).dtype, "")
            params, tensor = None, exp_name
        if not kind:
            continue
        try:
            x, y = source.load(src_name), export.load(exp_name)
            figures = budget(kind, x, y, params)
        except KeyError:
            continue
        row.quant = w.label if w is not None else kind
        row.verdict = figures.verdict
        row.budget = figures.max_budget
        row.budget_ratio = figures.ratio
        row.export_tensor = tensor
        if figures.approximate:
            row.note = f"approximate budget: {figures.rule}"
        if w is None and figures.verdict == BEYOND and awq_moved:
            row.verdict = UNPROVEN  # AWQ divides the norm before a scaled Linear by its scales
            row.note = "AWQ folds its activation scales into this tensor: no bound from the source"
        judged = w is not None and (w.params.get("moved_by") or w.scheme == "compressed-tensors")
        if (
            w is not None
            and judged
            and figures.verdict == BEYOND
            and w.storage_type.startswith("int")
        ):
            _judge_moved(row, figures, w, x, y, part_loader(export), params or {})
    return "a" if export_is_a else "b"


def _judge_moved(
    row: TensorDiff,
    figures: Budget,
    w: QuantWeight,
    x: torch.Tensor,
    y: torch.Tensor,
    load: Any,
    params: dict[str, Any],
) -> None:
    """An integer weight over its round-to-nearest budget: a fault only where proven.

    Round to nearest of the stored grid proven: the budget stands, unless every value over it
    is clipped at its grid's end (a clipping observer's scale: cannot tell). Else the weights
    may have been moved before rounding (GPTQ, AWQ, a GPTQ-made export without its recipe):
    beyond only for a gross fault (:mod:`.quant_evidence`), else cannot tell."""
    moved = w.params.get("moved_by")
    observer_only = bool(moved) and all(m.startswith("observer ") for m in str(moved).split(", "))
    head = f"{row.note}; " if row.note else ""
    if load is None or x.dim() != 2:
        ev = None
    else:
        x, y = x.detach().double(), y.detach().double().reshape(x.shape)
        ev = evidence(x, y, w, load)
    if ev is not None and ev.rtn and (not moved or observer_only):
        over = (y - x).abs() > scheme_allowance(w.storage_type, x, params)
        named = moved or "not named: no recipe.yaml, no observer in config.json"
        clip, explained = clipping(x, y, w, load, over, named)
        if explained and ev.ratio <= 1:
            row.verdict = UNPROVEN
            row.note = head + clip
            return
        if not explained and (clip or not moved):  # clipped past any observer's search, or
            row.note = head + (  # plain rounding: the budget stands
                clip
                or "every code is the nearest point of its stored grid: plain rounding, budget "
                "applies"
            )
            return
    if ev is not None and ev.ratio > 1:
        row.budget_ratio = max(ev.ratio, figures.ratio) if moved is None else ev.ratio
        row.note = head + describe(ev)
        return
    row.verdict = UNPROVEN
    why = (
        f"scales chosen by {moved}, not min-max"
        if observer_only
        else f"weights changed before rounding ({moved})"
        if moved
        else (
            "codes are not the nearest points of their stored grid to the source: the weights were "
            "moved before rounding (GPTQ-like, no recipe.yaml says so)"
        )
    )
    row.note = f"{head}{why}; " + (
        describe(ev) if ev is not None else "no group structure to judge"
    )


def quant_checks(view_a: CheckpointView, view_b: CheckpointView) -> list[ValueDiff]:
    """The export's quantization_config against its files, one changed row per finding."""
    found = _sides(view_a, view_b)
    if found is None:
        return []
    checks = found[1].values.get(QUANT_KEY, {}).get("checks", [])
    return [
        ValueDiff(f"export.{c['rule']} {c['module']}", "changed", "config", c["message"])
        for c in checks
    ]
