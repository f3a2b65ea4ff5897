"""What a tensor's storage type should cost, from the source's own values, and a verdict.

An export stores each source tensor ``x`` (after the converter's change, e.g. the Q/K
permutation) in a ggml type. Each type allows an error per element, derived from ``x``:

- F32 / F16 / BF16 / F64: the rounding of ``x`` to that type. Equal to that rounding bit for
  bit is **exact**; an element off by at most one unit in the last place of the type (another
  rounding mode) is within budget.
- Q8_0: blocks of 32 along a row share ``d = max|x| / 127``, stored as F16: an element is off by
  at most ``d / 2`` plus ``127 * |d - f16(d)|``.
- Q4_0 / Q5_0: ``d = m / -8`` (``-16``), ``m`` the block's value of largest magnitude; one
  full step ``|d|`` (the clamp at the positive end) plus the F16 rounding of ``d``.
- Q4_1 / Q5_1: ``d = (max - min) / 15`` (``31``) and ``min``, both F16: ``d / 2`` plus their
  rounding.
- each of these block rules is taken per element as the largest over what the writer may have
  quantized: the source itself (llama.cpp's converter) or its F16 / BF16 rounding
  (``llama-quantize`` reads an intermediate F16 / BF16 GGUF), plus that rounding.
- Q2_K ... Q6_K, given the export's bytes (``params={"raw": ...}``): half the step of each
  sub-block's grid as the export's own scales define it (the distance to the grid's end for a
  clamped element), plus the intermediate file's rounding (:mod:`.kquant_rule`).
- other types (IQ, ternary, FP4; K-quants without their bytes): **approximate**: one step of a
  plain quantizer of the type's bits over the block's range (``(max - min) / (2^bits - 1)``).
  That does not bound the writer: a tensor over it is ``cannot_tell``, never beyond budget.

:func:`budget` compares the export's values with ``x`` element by element: the largest error,
the largest budget, and the worst ratio error / budget. Verdict: ``exact``, ``within_budget``
(every element within its budget) or ``beyond_budget``. Rules are a table keyed by type name
(:data:`RULES`); a new type is one entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import kquant_rule, quant_rules

if TYPE_CHECKING:
    import torch

EXACT, WITHIN, BEYOND = "exact", "within_budget", "beyond_budget"
# over a budget that does not bound the writer (weights moved before rounding, e.g. GPTQ's error
# feedback): neither a fault nor within budget can be proven
UNPROVEN = "cannot_tell"
VERDICTS = (BEYOND, UNPROVEN, WITHIN, EXACT)  # worst first
SLACK = 1e-6  # relative slack on a budget (float64 arithmetic of the bound itself)


@dataclass(frozen=True)
class Budget:
    """One tensor's figures: ``ratio`` is max(error / budget) over its elements."""

    ggml_type: str
    verdict: str
    max_error: float
    max_budget: float
    ratio: float
    rule: str
    approximate: bool = False


def _ulp(x: torch.Tensor, mant_bits: int, min_exp: int) -> torch.Tensor:
    """One unit in the last place of a float type (``mant_bits`` stored bits) at ``|x|``."""
    import torch

    _, e = torch.frexp(x.abs())
    return torch.ldexp(torch.ones_like(x), torch.clamp(e - 1, min=min_exp) - mant_bits)


FLOATS = {  # name -> (torch dtype name, stored mantissa bits, smallest normal exponent)
    "F32": ("float32", 23, -126),
    "F16": ("float16", 10, -14),
    "BF16": ("bfloat16", 7, -126),
    "F64": ("float64", 52, -1022),
}


def _float_rule(name: str) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]:
    def rule(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        import torch

        dtype, mant, emin = FLOATS[name]
        rounded = x.to(getattr(torch, dtype)).double()
        return _ulp(x, mant, emin), rounded

    return rule


def _blocks(x: torch.Tensor, size: int) -> torch.Tensor:
    return x.reshape(-1, size)


def _f16_error(v: torch.Tensor) -> torch.Tensor:
    import torch

    return (v - v.to(torch.float16).double()).abs()


def _q8_0(x: torch.Tensor) -> torch.Tensor:
    b = _blocks(x, 32)
    d = b.abs().amax(dim=1, keepdim=True) / 127
    return (d / 2 + 127 * _f16_error(d)).expand_as(b).reshape(x.shape)


def _symmetric(levels: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def rule(x: torch.Tensor) -> torch.Tensor:
        import torch

        b = _blocks(x, 32)
        idx = b.abs().argmax(dim=1, keepdim=True)
        d = (torch.gather(b, 1, idx) / -levels).abs()
        return (d + levels * _f16_error(d)).expand_as(b).reshape(x.shape)

    return rule


def _affine(steps: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def rule(x: torch.Tensor) -> torch.Tensor:
        b = _blocks(x, 32)
        lo, hi = b.amin(dim=1, keepdim=True), b.amax(dim=1, keepdim=True)
        d = (hi - lo) / steps
        return (d / 2 + steps * _f16_error(d) + _f16_error(lo)).expand_as(b).reshape(x.shape)

    return rule


def _approx(bits: float, block: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def rule(x: torch.Tensor) -> torch.Tensor:
        b = _blocks(x, block)
        lo, hi = b.amin(dim=1, keepdim=True), b.amax(dim=1, keepdim=True)
        return ((hi - lo) / (2**bits - 1)).expand_as(b).reshape(x.shape)

    return rule


RULES: dict[str, tuple[Callable[..., torch.Tensor], str]] = {
    "Q8_0": (_q8_0, "half a step of each 32-block's scale max|x|/127 (F16 scale)"),
    "Q4_0": (_symmetric(8), "one step of each 32-block's scale m/-8 (F16 scale)"),
    "Q5_0": (_symmetric(16), "one step of each 32-block's scale m/-16 (F16 scale)"),
    "Q4_1": (_affine(15), "half a step of each 32-block's (max-min)/15 (F16 scale, min)"),
    "Q5_1": (_affine(31), "half a step of each 32-block's (max-min)/31 (F16 scale, min)"),
    # quantized safetensors (:mod:`.quant_rules`): the export's parameters are passed in
    "int2": (quant_rules.integer, "half a step of each share's min-max int2 scale"),
    "int3": (quant_rules.integer, "half a step of each share's min-max int3 scale"),
    "int4": (quant_rules.integer, "half a step of each share's min-max int4 scale"),
    "int8": (quant_rules.integer, "half a step of each share's min-max int8 scale"),
    "fp8_e4m3": (quant_rules.fp8, "half an e4m3 ulp of x / (amax/448) per share"),
    "fp8_e5m2": (quant_rules.fp8, "half an e5m2 ulp of x / (amax/57344) per share"),
    "nf4": (quant_rules.four_bit, "half the NF4 code gap times each block's absmax"),
    "fp4": (quant_rules.four_bit, "half the bitsandbytes FP4 code gap times each block's absmax"),
}
APPROX_BITS: dict[str, tuple[float, int]] = {  # type -> (bits per weight, block)
    "Q2_K": (2, 256),
    "Q3_K": (3, 256),
    "Q4_K": (4, 256),
    "Q5_K": (5, 256),
    "Q6_K": (6, 256),
    "Q8_K": (8, 256),
    "Q8_1": (8, 32),
    "IQ1_S": (1, 256),
    "IQ1_M": (1, 256),
    "IQ2_XXS": (2, 256),
    "IQ2_XS": (2, 256),
    "IQ2_S": (2, 256),
    "IQ3_XXS": (3, 256),
    "IQ3_S": (3, 256),
    "IQ4_NL": (4, 32),
    "IQ4_XS": (4, 256),
    "TQ1_0": (1.58, 256),
    "TQ2_0": (1.58, 256),
    "MXFP4": (3, 32),
    "NVFP4": (3, 64),
    "Q1_0": (1, 128),
}


def _from_intermediate(fn: Callable[..., torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """A GGUF block rule's budget when the writer may have quantized ``x`` itself (llama.cpp's
    converter) or its F16 / BF16 rounding (``llama-quantize`` reads an intermediate F16 / BF16
    GGUF): per element the largest of ``rule(x')`` plus ``|x - x'|`` over those three ``x'``."""
    import torch

    bound = fn(x)
    for dtype in (torch.float16, torch.bfloat16):
        inter = x.to(dtype).double()
        bound = torch.maximum(bound, fn(inter) + (x - inter).abs())
    return bound


def budget(
    ggml_type: str,
    expected: torch.Tensor,
    actual: torch.Tensor,
    params: Mapping[str, Any] | None = None,
) -> Budget:
    """The verdict for ``actual`` (the export's values, dequantized, in its own layout)
    against ``expected`` (the source after the converter's change, same layout).
    ``params``: a quantized-safetensors scheme's parameters (its rule's keywords; an
    ``approximate`` key marks the figures approximate).

    Raises:
        KeyError: a type no rule here knows.
    """
    import torch

    x = expected.detach().to(torch.float64).reshape(-1, expected.shape[-1] if expected.dim() else 1)
    y = actual.detach().to(torch.float64).reshape(x.shape)
    err = (y - x).abs()
    approximate = False
    if ggml_type in FLOATS:
        bound, rounded = _float_rule(ggml_type)(x)
        rule = f"the rounding of the source to {ggml_type}"
        assert rounded is not None
        if torch.equal(y, rounded) or (
            torch.isnan(y).equal(torch.isnan(rounded))
            and torch.equal(torch.nan_to_num(y), torch.nan_to_num(rounded))
        ):
            return Budget(ggml_type, EXACT, _max(err), _max(bound), 0.0, rule)
    elif ggml_type in RULES:
        fn, rule = RULES[ggml_type]
        if params is None:
            bound = _from_intermediate(fn, x)
        else:
            bound = _scheme_bound(ggml_type, x, params)
            approximate = bool(params.get("approximate"))
    elif ggml_type in kquant_rule.LAYOUTS and params is not None and "raw" in params:
        bound = kquant_rule.kquant(x, ggml_type, params["raw"])
        rule = "half a step of each sub-block's stored grid (its F16 d times its sub-block scale)"
    elif ggml_type in APPROX_BITS:
        bits, block = APPROX_BITS[ggml_type]
        bound = _approx(bits, block)(x)
        rule = f"approximate: one step of a plain {bits:g}-bit quantizer over each {block}-block"
        approximate = True
    else:
        raise KeyError(ggml_type)
    allowed = bound * (1 + SLACK)
    over = err / torch.where(allowed > 0, allowed, torch.full_like(allowed, float("inf")))
    over = torch.where((allowed == 0) & (err > 0), torch.full_like(err, float("inf")), over)
    over = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), over)
    ratio = _max(over)
    verdict = WITHIN if ratio <= 1.0 else BEYOND
    if verdict == BEYOND and ggml_type in APPROX_BITS and approximate and params is None:
        verdict = UNPROVEN  # a plain quantizer's step does not bound this type's writer
    if verdict == WITHIN and _max(err) == 0.0:
        verdict = EXACT
    return Budget(ggml_type, verdict, _max(err), _max(bound), ratio, rule, approximate)


def _scheme_bound(kind: str, x: torch.Tensor, params: Mapping[str, Any]) -> torch.Tensor:
    kw = {k: v for k, v in params.items() if k != "approximate"}
    return RULES[kind][0](x, kind=kind, **kw)


def scheme_allowance(kind: str, x: torch.Tensor, params: Mapping[str, Any]) -> torch.Tensor:
    """Per element what a quantized-safetensors scheme's rule allows ``x`` (2-D, its slack
    included): the bound :func:`budget` judges ``x`` with, given the same ``params``."""
    import torch

    return _scheme_bound(kind, x.detach().to(torch.float64), params) * (1 + SLACK)


def _max(t: torch.Tensor) -> float:
    return float(t.max()) if t.numel() else 0.0
