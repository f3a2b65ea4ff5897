"""What quantized-safetensors schemes should cost, from the source's own values.

Each rule takes the source ``x`` (2-D, float64, in the export's layout) and the scheme's
parameters as the export's ``quantization_config`` and parts give them, recomputes the scale
each group / block / row would get from ``x`` the way the scheme's writer computes it (min-max:
compressed-tensors' ``calculate_qparams``, DeepSeek's ``amax / fp8_max``, bitsandbytes'
absmax) and returns each element's budget:

- integer (compressed-tensors int4/int8, symmetric or with zero points; bitsandbytes LLM.int8):
  half a step ``s / 2`` of the recomputed scale (round to nearest; the clamp at the ends and a
  rounded zero point stay within it);
- FP8 (e4m3 / e5m2, per tensor, channel or block): half a unit in the last place of the FP8
  value ``x / s``, times ``s``;
- 4-bit codes (bitsandbytes nf4 / fp4): half the gap between the two codes around
  ``x / absmax``, times the block's absmax; double quantization also rounds the absmax (8-bit
  dynamic code over blocks of 256): half its top step is added, flagged approximate.

bitsandbytes' LLM.int8 casts the weight to float16 before quantizing: that rounding is added.

Every budget adds ``2^-20`` of ``|x| + s`` for the float32 arithmetic of the writer itself.
A writer whose observer clips (MSE, GPTQ's error feedback) may legitimately exceed these: the
rules describe min-max round-to-nearest quantization.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

F32_SLACK = 2.0**-20
FP8 = {  # name -> (stored mantissa bits, smallest normal exponent of frexp, largest finite)
    "fp8_e4m3": (3, -5, 448.0),
    "fp8_e5m2": (2, -13, 57344.0),
}
CODES = {  # bitsandbytes' 4-bit code tables (bitsandbytes.functional.get_4bit_type)
    "nf4": (
        -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
        -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
        0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
        0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
    ),
    "fp4": (
        0.0, 0.0052083334885537624, 0.6666666865348816, 1.0, 0.3333333432674408, 0.5,
        0.1666666716337204, 0.25, 0.0, -0.0052083334885537624, -0.6666666865348816, -1.0,
        -0.3333333432674408, -0.5, -0.1666666716337204, -0.25,
    ),
}  # fmt: skip


def _shared(x: torch.Tensor, params: dict[str, Any]) -> tuple[torch.Tensor, Any]:
    """``x`` reshaped so that each scale's elements share the last axes, and how to undo it."""
    import torch

    rows, cols = x.shape
    strategy = params.get("strategy", "tensor")
    if strategy == "group":
        gs = int(params["group_size"])
        return x.reshape(rows, cols // gs, gs), lambda t: t.reshape(rows, cols)
    if strategy == "channel":
        return x.reshape(rows, 1, cols), lambda t: t.reshape(rows, cols)
    if strategy == "block":
        bh, bw = (int(v) for v in params["block_structure"])
        pad = torch.nn.functional.pad(x, (0, -cols % bw, 0, -rows % bh))
        nb_r, nb_c = pad.shape[0] // bh, pad.shape[1] // bw
        blocks = pad.reshape(nb_r, bh, nb_c, bw).transpose(1, 2).reshape(nb_r * nb_c, 1, bh * bw)

        def back(t: torch.Tensor) -> torch.Tensor:
            full = t.reshape(nb_r, nb_c, bh, bw).transpose(1, 2).reshape(nb_r * bh, nb_c * bw)
            return full[:rows, :cols]

        return blocks, back
    return x.reshape(1, 1, -1), lambda t: t.reshape(rows, cols)


def _block_params(params: dict[str, Any]) -> dict[str, Any]:
    if "block_rows" in params:  # DeepSeek's weight_block_size
        return {
            "strategy": "block",
            "block_structure": (params["block_rows"], params["block_cols"]),
        }
    return params


def integer(x: torch.Tensor, **params: Any) -> torch.Tensor:
    """Half a step of the min-max scale of each group / row / block / tensor."""
    import torch

    bits = int(params.get("num_bits") or params.get("bits") or 8)
    x, rounding = _prerounded(x, params)
    shared, back = _shared(x, _block_params(params))
    lo = torch.clamp(shared.amin(-1, keepdim=True), max=0)
    hi = torch.clamp(shared.amax(-1, keepdim=True), min=0)
    if params.get("symmetric", True):
        levels = float(params.get("levels") or (2**bits - 1) / 2)
        s = torch.maximum(lo.abs(), hi) / levels
    else:
        s = (hi - lo) / (2**bits - 1)
    bound = s / 2 + F32_SLACK * (shared.abs() + s)
    return back(bound.expand_as(shared)) + rounding


def _prerounded(
    x: torch.Tensor, params: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor | float]:
    """``x`` as the writer saw it (bitsandbytes' Int8Params casts to float16 first) and the
    error that cast adds."""
    import torch

    dtype = params.get("input_dtype")
    if not dtype:
        return x, 0.0
    rounded = x.to(getattr(torch, str(dtype))).to(x.dtype)
    return rounded, (x - rounded).abs()


def fp8(x: torch.Tensor, **params: Any) -> torch.Tensor:
    """Half an FP8 ulp of ``x / s`` times ``s``, ``s = amax / fp8 max`` of each share."""
    import torch

    mant, emin, top = FP8[params["kind"]]
    shared, back = _shared(x, _block_params(params))
    s = shared.abs().amax(-1, keepdim=True) / top
    safe = torch.where(s > 0, s, torch.ones_like(s))
    _, e = torch.frexp((shared / safe).abs())
    half_ulp = torch.ldexp(torch.ones_like(shared), torch.clamp(e, min=emin) - mant - 2)
    bound = half_ulp * s + F32_SLACK * (shared.abs() + s)
    return back(bound)


def four_bit(x: torch.Tensor, **params: Any) -> torch.Tensor:
    """Half the gap between the codes around ``x / absmax`` times each block's absmax."""
    import torch

    codes = torch.tensor(sorted(set(CODES[params["kind"]])), dtype=torch.float64)
    block = int(params.get("blocksize", 64))
    flat = x.reshape(-1)
    n = flat.numel()
    pad = torch.nn.functional.pad(flat, (0, -n % block)).reshape(-1, block)
    absmax = pad.abs().amax(-1, keepdim=True)
    v = pad / torch.where(absmax > 0, absmax, torch.ones_like(absmax))
    hi_i = torch.clamp(torch.searchsorted(codes, v.contiguous()), 1, len(codes) - 1)
    gap = codes[hi_i] - codes[hi_i - 1]
    bound = gap / 2 * absmax + F32_SLACK * (pad.abs() + absmax)
    if params.get("double_quant"):
        bound = (
            bound
            + v.abs()
            * _nested_step(absmax.reshape(-1), int(params.get("nested_blocksize", 256)))[:, None]
        )
    return bound.reshape(-1)[:n].reshape(x.shape)


def _nested_step(absmax: torch.Tensor, block: int) -> torch.Tensor:
    """Approximate: one step of bitsandbytes' 8-bit dynamic code at its top (``2^-6`` of the
    block's largest magnitude) over each ``block`` of ``absmax - mean(absmax)``, what double
    quantization stores; each code's error is at most that times ``|code|``."""
    import torch

    dev = absmax - absmax.mean()
    n = dev.numel()
    top = torch.nn.functional.pad(dev.abs(), (0, -n % block)).reshape(-1, block).amax(-1)
    return (top * 2.0**-6).repeat_interleave(block)[:n]
