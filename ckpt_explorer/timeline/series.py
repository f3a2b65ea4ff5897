"""Per-step series of a timeline, for plots (the dashboard's Timeline view and ``--json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .summaries import CheckpointSummary, PairSummary


def build_series(checkpoints: list[CheckpointSummary], pairs: list[PairSummary]) -> dict[str, Any]:
    """``steps``, ``opt_step``, ``sched_step``, ``lr`` (group -> values), ``moments``
    (``"group 0 exp_avg"`` -> norms), and ``update_ratio``: ``{"layers", "steps", "values"}``
    with ``values[layer][pair]`` = ‖Δ‖/‖W‖ of that layer from the previous checkpoint to
    ``steps[pair]`` (None where the layer is absent)."""
    cks = [c for c in checkpoints if c.error is None]
    lr: dict[str, list[Any]] = {}
    moments: dict[str, list[Any]] = {}
    for i, c in enumerate(cks):
        for g, group in enumerate(c.groups):
            lr.setdefault(f"group {g}", [None] * len(cks))[i] = group.get("lr")
        for key, moms in c.moments.items():
            for state, v in moms.items():
                moments.setdefault(f"{key} {state}", [None] * len(cks))[i] = v
    layers = sorted({k for p in pairs for k in p.layers})
    return {
        "steps": [c.step for c in cks],
        "paths": [c.path for c in cks],
        "opt_step": [c.opt_step for c in cks],
        "sched_step": [c.sched_step for c in cks],
        "lr": lr,
        "moments": moments,
        "update_ratio": {
            "layers": layers,
            "steps": [p.step_b for p in pairs],
            "values": [[p.layers.get(layer) for p in pairs] for layer in layers],
        },
    }
