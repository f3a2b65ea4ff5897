"""Update-ratio spikes and collapses in one layer, robustly.

A layer's update ratio ‖ΔW‖/‖W‖ follows the learning rate, so the schedule (warm-up, decay,
a resume) moves every layer together. Each pair's ratios are therefore taken relative to the
median layer of that pair (log scale), and a layer is an outlier when its relative level at one
pair is far from its own median over the run: more than ``Z`` robust deviations (1.4826 x MAD)
and more than ``FACTOR`` times. Only with at least ``MIN_PAIRS`` pairs and ``MIN_LAYERS`` layers;
otherwise nothing is claimed.
"""

from __future__ import annotations

import math
from statistics import median

from .summaries import Anomaly, CheckpointSummary, PairSummary

MIN_PAIRS = 5
MIN_LAYERS = 3
Z = 6.0
FACTOR = 10.0


def update_outliers(cks: list[CheckpointSummary], pairs: list[PairSummary]) -> list[Anomaly]:
    if len(pairs) < MIN_PAIRS:
        return []
    rel: dict[str, list[float | None]] = {}
    layers = sorted({k for p in pairs for k in p.layers})
    if len(layers) < MIN_LAYERS:
        return []
    for i, p in enumerate(pairs):
        logs = [math.log(v) for v in p.layers.values() if v > 0]
        if len(logs) < MIN_LAYERS:
            continue
        mid = median(logs)
        for layer in layers:
            v = p.layers.get(layer)
            rel.setdefault(layer, [None] * len(pairs))[i] = (
                math.log(v) - mid if v is not None and v > 0 else None
            )
    out = []
    for layer, series in rel.items():
        known = [x for x in series if x is not None]
        if len(known) < MIN_PAIRS:
            continue
        centre = median(known)
        mad = median(abs(x - centre) for x in known)
        scale = max(1.4826 * mad, 1e-3)
        for i, x in enumerate(series):
            if x is None:
                continue
            dev = x - centre
            if abs(dev) > Z * scale and abs(dev) > math.log(FACTOR):
                p = pairs[i]
                kind = "update_spike" if dev > 0 else "update_collapse"
                factor = math.exp(abs(dev))
                b = cks[i + 1] if i + 1 < len(cks) else None
                out.append(
                    Anomaly(
                        p.step_b,
                        kind,
                        "warning",
                        f"layer {layer}: update ratio {p.layers[layer]:.3g} is {factor:.3g}x "
                        f"{'above' if dev > 0 else 'below'} its usual level relative to the "
                        "other layers",
                        [
                            f"steps {p.step_a} → {p.step_b}: ‖Δ‖/‖W‖ {p.layers[layer]:.3g}, "
                            f"median layer {math.exp(math.log(p.layers[layer]) - x):.3g}",
                            f"over {len(known)} pairs this layer is usually "
                            f"{math.exp(centre):.3g}x the median layer (MAD {mad:.3g} in log)",
                        ],
                        b.path if b is not None else p.path_b,
                    )
                )
    return out
