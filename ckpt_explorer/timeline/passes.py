"""The tensor passes: one streamed diff per consecutive pair (the diff engine: one tensor pair
in memory at a time, float64 sums), and a value pass for tensors no pair gave figures for."""

from __future__ import annotations

import math
import re
from typing import Any

from ..contracts import ProgressFn
from ..diff.rows import (
    CHANGED,
    DTYPE_MISMATCH,
    EQUAL,
    IDENTICAL,
    ONLY_IN_A,
    ONLY_IN_B,
    SHAPE_MISMATCH,
    TensorDiff,
)
from ..readers.roles import MOMENTS
from ..validate.parts import Components
from ..view import CheckpointView
from .facts import Part, extra_optimizer_views, main_part, state_records
from .summaries import CheckpointSummary, PairSummary, TensorFacts, _is_float

_LAYER = re.compile(r"^(.*?(?:^|\.)\d+)\.")


def layer_of(name: str) -> str:
    """``model/transformer.h.3.attn.c_attn.weight`` -> ``transformer.h.3``; names without a
    layer index give their module (``transformer.wte``)."""
    base = name.rsplit("/", 1)[-1]
    m = _LAYER.match(base)
    if m:
        return m.group(1)
    return base.rsplit(".", 1)[0] if "." in base else base


def is_model_tensor(t: TensorFacts) -> bool:
    """A float tensor of the model (not an optimizer state, not an EMA copy's)."""
    return t.state is None and t.role is None and _is_float(t.dtype)


def _diff(
    va: CheckpointView, vb: CheckpointView, progress: ProgressFn | None, readahead: bool
) -> list[TensorDiff]:
    """The tensor rows of ``diff_checkpoints(va, vb)`` (defaults: exact, CPU), without its
    value comparison, which the timeline does not use."""
    from ..diff.engine import Engine, plan_pairs

    return Engine(va, vb, progress=progress, readahead=readahead).run(plan_pairs(va, vb))


def _rows(
    pa: list[Part], pb: list[Part], progress: ProgressFn | None, readahead: bool
) -> list[tuple[str, str, TensorDiff]]:
    """(name in A, name in B, row) for the top views and their separate optimizer files, part
    by part (a part is diffed with the part of the same label: model with model, EMA with
    EMA, optimizer with optimizer; a part on one side only gives no row)."""
    out = []
    for (label, va, ca), (label_b, vb, cb) in _matched(pa, pb):
        rows = _diff(va, vb, progress, readahead)
        out += [(label + r.name, label_b + (r.name_b or r.name), r) for r in rows]
        extra_b = {o.label: o for o in extra_optimizer_views(vb, cb)}
        for oa in extra_optimizer_views(va, ca):
            ob = extra_b.get(oa.label)
            if ob is None:
                continue
            keep = {r.name for r in state_records(oa)}
            for r in _diff(oa.view, ob.view, None, readahead):
                if r.name not in keep:
                    continue  # flat partitions: the per-parameter slices hold the same values
                out.append(
                    (label + oa.label + r.name, label_b + ob.label + (r.name_b or r.name), r)
                )
    return out


def _matched(pa: list[Part], pb: list[Part]) -> list[tuple[Part, Part]]:
    """Parts of A and B to diff: same label; a whole checkpoint (one part labelled ``""``)
    beside one saved per part is diffed with the part that holds the model."""
    if len(pa) == 1 and pa[0][0] == "" and (len(pb) > 1 or pb[0][0] != ""):
        b = main_part(pb)
        return [(pa[0], b)] if b is not None else []
    if len(pb) == 1 and pb[0][0] == "" and (len(pa) > 1 or pa[0][0] != ""):
        a = main_part(pa)
        return [(a, pb[0])] if a is not None else []
    by_label = {part[0]: part for part in pb}
    return [(a, by_label[a[0]]) for a in pa if a[0] in by_label]


def pair_pass(
    va: CheckpointView,
    ca: Components,
    sa: CheckpointSummary,
    vb: CheckpointView,
    cb: Components,
    sb: CheckpointSummary,
    progress: ProgressFn | None = None,
    readahead: bool = True,
) -> PairSummary:
    """Diff two consecutive checkpoints; fill ``sb``'s tensor figures (and ``sa``'s where the
    pair gives them and they are missing); return the pair's update ratios. ``readahead``
    False: the caller already reads both checkpoints' files ahead."""
    return pair_pass_parts([("", va, ca)], sa, [("", vb, cb)], sb, progress, readahead)


def pair_pass_parts(
    pa: list[Part],
    sa: CheckpointSummary,
    pb: list[Part],
    sb: CheckpointSummary,
    progress: ProgressFn | None = None,
    readahead: bool = True,
) -> PairSummary:
    """:func:`pair_pass` for checkpoints given as labelled parts (one part labelled ``""``
    for a checkpoint file or folder)."""
    pair = PairSummary(str(sa.path), str(sb.path), sa.step, sb.step)
    layers: dict[str, list[float]] = {}
    moments: dict[str, dict[str, list[float]]] = {}
    for name_a, name_b, r in _rows(pa, pb, progress, readahead):
        fa, fb = sa.tensors.get(name_a), sb.tensors.get(name_b)
        if r.status == ONLY_IN_A or r.status == ONLY_IN_B:
            f = fa or fb
            if f is not None and is_model_tensor(f):
                if r.status == ONLY_IN_A:
                    pair.only_a.append(name_a)
                else:
                    pair.only_b.append(name_b)
            continue
        if fa is None or fb is None:
            continue
        if r.status == SHAPE_MISMATCH:
            pair.shape_changes[name_b] = [list(fa.shape), list(fb.shape)]
            continue
        if r.dtype_a != r.dtype_b:
            pair.dtype_changes[name_b] = [str(r.dtype_a), str(r.dtype_b)]
        if r.status == IDENTICAL:
            if fa.norm is not None and fb.norm is None:
                fb.norm, fb.nan, fb.inf = fa.norm, fa.nan, fa.inf
            diff, norm_a = 0.0, fa.norm
        elif r.status in (CHANGED, EQUAL, DTYPE_MISMATCH):
            fb.norm, fb.nan, fb.inf = r.norm_b, r.nan_b, r.inf_b
            if fa.norm is None:
                fa.norm, fa.nan, fa.inf = r.norm_a, r.nan_a, r.inf_a
            diff, norm_a = r.diff_l2 or 0.0, r.norm_a
        else:
            continue
        if is_model_tensor(fb):
            if r.status == IDENTICAL:
                pair.unchanged.append(name_b)
            if norm_a:
                pair.ratios[name_b] = diff / norm_a
            acc = layers.setdefault(layer_of(name_b), [0.0, 0.0])
            acc[0] += diff**2
            acc[1] += (norm_a or 0.0) ** 2
        elif fb.state in MOMENTS:
            key = f"group {fb.group}" if fb.group is not None else "all"
            acc = moments.setdefault(key, {}).setdefault(fb.state, [0.0, 0.0])
            acc[0] += diff**2
            acc[1] += (norm_a or 0.0) ** 2
    pair.layers = {k: math.sqrt(d) / math.sqrt(n) for k, (d, n) in layers.items() if n > 0}
    pair.moments = {
        g: {s: math.sqrt(d) / math.sqrt(n) for s, (d, n) in states.items() if n > 0}
        for g, states in moments.items()
    }
    return pair


def value_pass(view: CheckpointView, comps: Components, summary: CheckpointSummary) -> int:
    """Norm and NaN/Inf counts of the float tensors of ``summary`` still without them (the
    first checkpoint's tensors that did not change, or a one-checkpoint run); returns how many
    tensors were read."""
    return value_pass_parts([("", view, comps)], summary)


def value_pass_parts(parts: list[Part], summary: CheckpointSummary) -> int:
    """:func:`value_pass` for a checkpoint given as labelled parts."""
    sources: list[tuple[str, CheckpointView]] = []  # (name prefix, view), longest first
    for label, view, comps in parts:
        sources += [(label + o.label, o.view) for o in extra_optimizer_views(view, comps)]
        sources.append((label, view))
    sources.sort(key=lambda lv: -len(lv[0]))
    done = 0
    for name, f in summary.tensors.items():
        if f.norm is not None or not _is_float(f.dtype):
            continue
        for prefix, source in sources:
            local = name[len(prefix) :]
            if name.startswith(prefix) and local in source:
                break
        else:
            continue  # listed, but in no part now (cannot happen for a fresh summary)
        f.norm, f.nan, f.inf = _figures(source.load(local))
        done += 1
    return done


def _figures(t: Any) -> tuple[float, int, int]:
    """(L2 norm over finite elements, NaN count, Inf count), float64, streamed in chunks."""
    import torch

    from ..diff import kernel

    flat = t.reshape(-1)
    step = 1 << 22
    if kernel.have_numba():
        m = kernel.merge_values(
            [kernel.value_partials(flat[i : i + step]) for i in range(0, flat.numel(), step)]
        )
        return math.sqrt(m["sq"]), int(m["nan"]), int(m["inf"])
    sq, nan, inf = 0.0, 0, 0
    for i in range(0, flat.numel(), step):
        c = flat[i : i + step].to(torch.float64)
        finite = torch.isfinite(c)
        nan += int(torch.isnan(c).sum())
        inf += int(torch.isinf(c).sum())
        sq += float(c[finite].square().sum())
    return math.sqrt(sq), nan, inf
