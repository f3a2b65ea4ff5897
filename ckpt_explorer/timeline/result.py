"""A run's timeline: its checkpoints in step order, their pairs and the anomalies found, with
the series and tables made from them (the value types are in :mod:`.summaries`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .series import build_series
from .summaries import Anomaly, CheckpointSummary, PairSummary, _json_safe

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Timeline:
    """A run's checkpoints in step order, the consecutive pairs, and the anomalies found.

    Attributes:
        run_dir: the run folder.
        checkpoints: in step order (unreadable ones last, with ``error`` set).
        pairs: ``pairs[i]`` is checkpoints[i] -> checkpoints[i + 1] (readable ones only).
        anomalies: in step order, errors first within a step.
        stats: work done: ``opened`` checkpoints, ``pair_passes``, ``value_passes`` (tensor
            reads), ``cached`` summaries reused; a fully cached rebuild reads no tensor.
        pending: checkpoints seen but still being written (``--watch``), not read yet.
    """

    run_dir: str
    checkpoints: list[CheckpointSummary]
    pairs: list[PairSummary]
    anomalies: list[Anomaly]
    stats: dict[str, int] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)

    @property
    def has_error(self) -> bool:
        return any(a.severity == "error" for a in self.anomalies)

    def series(self) -> dict[str, Any]:
        """Per-step series for plots: steps, lr and moment norms per group, counters, and the
        layer x pair update-ratio matrix."""
        return build_series(self.checkpoints, self.pairs)

    def to_frame(self) -> pd.DataFrame:
        """One row per checkpoint, in step order (unreadable ones last, with their error)."""
        import pandas as pd

        cols = ["path", "step", "step_source", "family", "kind", "opt_step", "sched_step"]
        rows = [
            {**{k: getattr(c, k) for k in cols}, "tensors": len(c.tensors), "error": c.error}
            for c in self.checkpoints
        ]
        return pd.DataFrame(rows, columns=[*cols, "tensors", "error"])

    def to_json(self, detail: bool = False) -> dict[str, Any]:
        """``{"run_dir", "checkpoints", "pairs", "anomalies", "series", "stats"}``; per-tensor
        figures only with ``detail``."""
        return {
            "run_dir": self.run_dir,
            "checkpoints": [c.to_dict(tensors=detail) for c in self.checkpoints],
            "pairs": [p.to_dict(tensors=detail) for p in self.pairs],
            "anomalies": [a.to_dict() for a in self.anomalies],
            "series": _json_safe(self.series()),
            "stats": dict(self.stats),
            "pending": list(self.pending),
        }
