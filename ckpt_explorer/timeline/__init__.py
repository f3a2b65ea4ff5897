"""The run timeline: a run folder's checkpoints over time, and where training went wrong.

``build_timeline(run_dir, cache_dir=None, progress=None) -> Timeline`` discovers the checkpoints
(:mod:`.discover`), reads each one's record and tensor figures with one streamed pass per
consecutive pair (:mod:`.passes`, cached per file identity by :mod:`.cache`), and finds
anomalies (:mod:`.anomalies`). No UI code here: the CLI and the dashboard render a
:class:`Timeline`.

Example:
    >>> t = build_timeline("runs/exp1", cache_dir=default_cache_dir())   # doctest: +SKIP
    >>> [(a.step, a.kind, a.severity) for a in t.anomalies]              # doctest: +SKIP
"""

from __future__ import annotations

from .build import build_timeline
from .cache import SummaryCache, default_cache_dir
from .model import Anomaly, CheckpointSummary, PairSummary, TensorFacts, Timeline

__all__ = [
    "Anomaly",
    "CheckpointSummary",
    "PairSummary",
    "SummaryCache",
    "TensorFacts",
    "Timeline",
    "build_timeline",
    "default_cache_dir",
]
