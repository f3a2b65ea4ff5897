"""What can be said of an integer export whose writer may have moved the weights before rounding.

GPTQ (error feedback), AWQ (activation-aware scaling) and GPTQ-made compressed-tensors exports
round weights that are no longer the trained ones: no per-element bound from the source holds,
so the round-to-nearest half step is not a budget for them. What stays provable:

- **round to nearest, proven** (compressed-tensors integer groups / channels): every stored
  value is the nearest point of its own stored grid ``scale * (q - zero)`` to the source value
  (within half its stored step, or at its group's end with the source beyond it). Then the
  export is plain rounding of the source and the min-max budget applies as it stands;
- **a gross fault** (AWQ's per-input-column scaling undone first: each column's
  least-squares factor over all rows divided out): a group (one output row's input columns sharing a scale) whose values are
  not the source's: its least-squares gain ``<x, y> / <x, x>`` at most ``LOW`` (values
  unrelated to the source: another layer's or expert's, a permuted ``g_idx``) or at least
  ``HIGH`` (a scale off by a factor). Error feedback and activation scaling change values by a
  fraction of a step around the source's (GPTQModel exports of a tiny Llama: worst group gain
  1.12 at 3/4/8-bit, 1.27 at 2-bit; AutoAWQ 4-bit, its column scaling undone: 1.24); they do
  not scale a whole group by 1.6 or decorrelate it.

- **clipping, not a fault**: a round-to-nearest export whose values over the min-max budget
  are all stored at their grid's ends with the source beyond them (a scale chosen below
  min-max: llm-compressor's ``mse`` observer) is *cannot tell* (:func:`clipping`), unless a
  gross fault is shown; a value over the budget that is not clipped, or a step under
  ``CLIP_FLOOR`` times min-max, keeps the budget's verdict.

- **a fault in a round-to-nearest export**: at least ``RTN_SHARE`` of a tensor's groups are
  round to nearest of their stored grid, the others not (error feedback leaves few groups all
  nearest: 1 to 5 % in GPTQ-made compressed-tensors exports here);

Anything else is ``cannot_tell``, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from ..readers.quantized.parts import Load, QuantWeight

LOW, HIGH = 0.4, 1.6
RTN_SHARE = 0.95  # GPTQ-made exports here: 1-5 % of groups all nearest; round to nearest: 100 %
MIN_GROUP = 8  # groups smaller than this give no gain worth judging
# a clipping observer's smallest step over min-max: llm-compressor's MSE search goes down to
# 1 - maxshrink (0.80 by default); below half, clipping is a fault, not an observer's choice
CLIP_FLOOR = 0.5


@dataclass(frozen=True)
class Evidence:
    """``rtn``: round to nearest of the stored grid proven; ``worst_gain``: the group gain
    farthest from 1 (as a factor) and ``where`` it is; ``ratio``: how far past the gross-fault
    line that gain is (> 1: a gross fault)."""

    rtn: bool
    worst_gain: float
    where: str
    ratio: float


def group_ids(w: QuantWeight, load: Load) -> torch.Tensor | None:
    """Each element's group ``[out, in]`` (row times the input group); None when unknown."""
    import torch

    rows, cols = w.shape
    g_idx = w.parts.get("g_idx")
    if g_idx is not None:
        col_group = load(g_idx).reshape(-1).long()
    elif w.params.get("strategy") == "group" and w.params.get("group_size"):
        col_group = torch.arange(cols) // int(w.params["group_size"])
    elif w.params.get("strategy") == "channel":
        col_group = torch.zeros(cols, dtype=torch.long)
    else:
        return None
    n = int(col_group.max()) + 1 if col_group.numel() else 1
    return torch.arange(rows)[:, None] * n + col_group[None, :]


def _steps(w: QuantWeight, load: Load) -> torch.Tensor | None:
    """compressed-tensors' stored step (scale) per element ``[out, in]``; None for other
    schemes (their grid is the writer's own, not checked here)."""
    strategy = w.params.get("strategy")
    if w.scheme != "compressed-tensors" or strategy not in ("group", "channel"):
        return None
    if not w.storage_type.startswith("int"):
        return None
    rows, cols = w.shape
    scale = load(w.parts["weight_scale"]).double().reshape(rows, -1)
    if strategy == "group":
        scale = scale.repeat_interleave(int(w.params["group_size"]), 1)[:, :cols]
    return scale.expand(rows, cols)


def nearest_groups(
    x: torch.Tensor, y: torch.Tensor, w: QuantWeight, load: Load
) -> tuple[float, str] | None:
    """The share of groups whose every value is the nearest point of its stored grid to ``x``
    (within half a step, or at its group's end -- the group's largest or smallest value --
    with ``x`` beyond it; the zero point need not be decoded: ``y`` is on the grid by
    construction) and where the first other group is; None where the grid is not known."""
    import torch

    step = _steps(w, load)
    ids = group_ids(w, load)
    if step is None or ids is None or ids.shape != x.shape:
        return None
    flat = ids.reshape(-1)
    n = int(flat.max()) + 1
    yf = y.reshape(-1)
    top = torch.full((n,), -torch.inf, dtype=y.dtype).scatter_reduce(0, flat, yf, "amax")
    low = torch.full((n,), torch.inf, dtype=y.dtype).scatter_reduce(0, flat, yf, "amin")
    err = (x - y).abs()
    near = err <= step / 2 + 2.0**-20 * (x.abs() + step)  # the writer computes in float32
    at_top = (y == top[ids]) & (x > y)
    at_low = (y == low[ids]) & (x < y)
    off = (~(near | at_top | at_low)).reshape(-1).to(torch.float64)
    per_group = torch.zeros(n, dtype=torch.float64).index_add_(0, flat, off)
    used = torch.zeros(n, dtype=torch.bool)
    used[flat] = True
    share = float(((per_group == 0) & used).sum()) / max(int(used.sum()), 1)
    bad = torch.nonzero(per_group > 0)
    per_row = n // x.shape[0] if x.shape[0] else 1
    where = "row {}, group {}".format(*divmod(int(bad[0]), per_row)) if bad.numel() else ""
    return share, where


def clipped(x: torch.Tensor, y: torch.Tensor, w: QuantWeight, load: Load) -> torch.Tensor | None:
    """Where a value is stored at its grid's end with the source beyond it (clipped), as a mask
    ``[out, in]``. A symmetric grid's ends are the codes ``-2**(bits-1)`` and ``2**(bits-1)-1``
    (``y / step``); an asymmetric one's are not known without decoding its zero point, so its
    group's largest and smallest stored values stand for them. None where the grid is unknown."""
    import torch

    step = _steps(w, load)
    ids = group_ids(w, load)
    if step is None or ids is None or ids.shape != x.shape:
        return None
    if w.params.get("symmetric", True):
        code = torch.round(y / torch.where(step > 0, step, torch.ones_like(step)))
        top_code = 2 ** (int(w.bits) - 1) - 1
        at_top, at_low = code == top_code, code == -top_code - 1
    else:
        flat, yf = ids.reshape(-1), y.reshape(-1)
        n = int(flat.max()) + 1
        top = torch.full((n,), -torch.inf, dtype=y.dtype).scatter_reduce(0, flat, yf, "amax")
        low = torch.full((n,), torch.inf, dtype=y.dtype).scatter_reduce(0, flat, yf, "amin")
        at_top, at_low = y == top[ids], y == low[ids]
    return (at_top & (x > y)) | (at_low & (x < y))


def step_shrink(x: torch.Tensor, w: QuantWeight, load: Load) -> tuple[float, float] | None:
    """The smallest and largest stored step over the min-max step of its group (min and max
    taken with 0, as compressed-tensors' min-max observer does); None where unknown."""
    import torch

    step = _steps(w, load)
    ids = group_ids(w, load)
    if step is None or ids is None or ids.shape != x.shape:
        return None
    flat, xf = ids.reshape(-1), x.reshape(-1)
    n = int(flat.max()) + 1
    hi = torch.zeros(n, dtype=x.dtype).scatter_reduce(0, flat, xf, "amax")
    lo = torch.zeros(n, dtype=x.dtype).scatter_reduce(0, flat, xf, "amin")
    levels = 2 ** int(w.bits) - 1
    if w.params.get("symmetric", True):
        minmax = torch.maximum(hi, -lo) / (levels / 2)
    else:
        minmax = (hi - lo) / levels
    stored = torch.zeros(n, dtype=x.dtype).scatter_reduce(0, flat, step.reshape(-1), "amax")
    ratio = (stored / minmax)[minmax > 0]
    return (float(ratio.min()), float(ratio.max())) if ratio.numel() else None


def clip_floor(params: dict[str, Any]) -> float:
    """``CLIP_FLOOR``, or lower where the export's weight args give the observer a larger
    ``maxshrink`` (llm-compressor's ``observer_kwargs``: its search goes down to
    ``1 - maxshrink``)."""
    kwargs = params.get("observer_kwargs")
    shrink = kwargs.get("maxshrink") if isinstance(kwargs, dict) else None
    if isinstance(shrink, int | float) and not isinstance(shrink, bool) and 0 < shrink < 1:
        return min(CLIP_FLOOR, 1 - float(shrink) - 0.01)
    return CLIP_FLOOR


def clipping(
    x: torch.Tensor,
    y: torch.Tensor,
    w: QuantWeight,
    load: Load,
    over: torch.Tensor,
    observer: str,
) -> tuple[str, bool]:
    """Whether values over the min-max budget (``over``) of an export proven round to nearest
    of its stored grid are explained by a clipping observer, and what to say: every one clipped
    at its grid's end and every stored step at least ``CLIP_FLOOR`` times its min-max step (a
    scale chosen below min-max: llm-compressor's ``mse`` observer shrinks each range by up to
    20 % and clips what lies past it). ``("", False)`` where some value over the budget is not
    clipped (a scale too large, values not the source's): the min-max budget stands."""
    clip = clipped(x, y, w, load)
    if clip is None or not bool(over.any()) or bool((over & ~clip).any()):
        return "", False
    shrink = step_shrink(x, w, load)
    if shrink is None:
        return "", False
    head = (
        f"every code is the nearest point of its stored grid and the {int(over.sum())} values "
        "past the min-max budget are all clipped at the grid's ends (the source beyond them)"
    )
    steps = f"stored steps {shrink[0]:.2f}-{shrink[1]:.2f}x min-max"
    floor = clip_floor(w.params)
    if shrink[0] < floor:
        return (
            f"{head}, but {steps}: below {floor:.2g}x, past what a clipping observer's search "
            "reaches (MSE: 0.80x by default)",
            False,
        )
    return (
        f"{head}: scales chosen below min-max by a clipping observer ({observer}; {steps}); no "
        "bound from the source holds for a clipped value",
        True,
    )


def g_idx_fault(w: QuantWeight, load: Load) -> str:
    """A GPTQ ``g_idx`` no GPTQ writer makes: without ``desc_act`` it is ``i // group_size``
    (kernels that ignore it, ExLlama and Marlin, and those that read it would compute
    different weights); with it, each group holds ``group_size`` columns."""
    import torch

    if "g_idx" not in w.parts or w.scheme != "gptq":
        return ""
    g = load(w.parts["g_idx"]).reshape(-1).long()
    gs = int(w.params.get("group_size") or g.numel())
    if not w.params.get("desc_act"):
        if not torch.equal(g, torch.arange(g.numel()) // gs):
            return f"g_idx is not i // {gs} though desc_act is false"
        return ""
    counts = torch.bincount(g)
    if bool((counts[:-1] != gs).any()):
        return f"g_idx groups do not hold {gs} columns each"
    return ""


def evidence(x: torch.Tensor, y: torch.Tensor, w: QuantWeight, load: Load) -> Evidence | None:
    """The figures for one weight (``x`` source, ``y`` export, ``[out, in]`` float64)."""
    import torch

    near = nearest_groups(x, y, w, load)
    share, off = near if near is not None else (0.0, "")
    rtn = share == 1.0
    if RTN_SHARE <= share < 1.0 and not w.params.get("moved_by"):
        # a round-to-nearest writer (the rest proves it) with groups off their grid's nearest
        return Evidence(
            False,
            float("nan"),
            f"{off} is not round to nearest of its stored grid, {share:.1%} of the groups are",
            float("inf"),
        )
    bad = g_idx_fault(w, load)
    if bad:
        return Evidence(rtn, float("nan"), bad, float("inf"))
    if w.scheme == "awq":  # AWQ scales each input column of the weight: undo it first
        col = (x * y).sum(0) / torch.where((x * x).sum(0) > 0, (x * x).sum(0), torch.ones(1))
        y = y / torch.where(col > 0, col, torch.ones_like(col))[None, :]
    ids = group_ids(w, load)
    if ids is None or ids.shape != x.shape:
        return Evidence(rtn, 1.0, "", 0.0) if rtn else None
    flat = ids.reshape(-1)
    n = int(flat.max()) + 1
    xx = torch.zeros(n, dtype=torch.float64).index_add_(0, flat, (x * x).reshape(-1))
    xy = torch.zeros(n, dtype=torch.float64).index_add_(0, flat, (x * y).reshape(-1))
    size = torch.zeros(n, dtype=torch.float64).index_add_(
        0, flat, torch.ones_like(flat, dtype=torch.float64)
    )
    usable = (size >= MIN_GROUP) & (xx > 0)
    if not bool(usable.any()):
        return Evidence(rtn, 1.0, "", 0.0)
    gain = torch.where(
        usable, xy / torch.where(xx > 0, xx, torch.ones_like(xx)), torch.ones_like(xx)
    )
    # how far past the line each gain is: > 1 beyond it
    past = torch.maximum(gain / HIGH, LOW / torch.clamp(gain, min=1e-300))
    past = torch.where(gain <= 0, torch.full_like(gain, float("inf")), past)
    past = torch.where(usable, past, torch.zeros_like(past))
    worst = int(past.argmax())
    per_row = n // x.shape[0] if x.shape[0] else 1
    row, group = divmod(worst, per_row)
    return Evidence(rtn, float(gain[worst]), f"row {row}, group {group}", float(past[worst]))


def describe(ev: Evidence) -> str:
    if ev.ratio > 1 and ev.worst_gain != ev.worst_gain:  # NaN: a structural fault
        return f"gross fault: {ev.where}"
    if ev.ratio > 1:
        return (
            f"gross fault: {ev.where} is {ev.worst_gain:.3g}x the source (least-squares gain; "
            f"outside {LOW}..{HIGH}, which error feedback or activation scaling do not reach)"
        )
    return (
        "the weights were moved before rounding: no per-element bound from the source holds "
        f"(group gains within {LOW}..{HIGH}: no gross fault; worst {ev.worst_gain:.3g}x at "
        f"{ev.where or 'no group'})"
    )
