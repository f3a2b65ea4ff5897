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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .build import build_timeline
    from .cache import SummaryCache, default_cache_dir
    from .result import Timeline
    from .summaries import Anomaly, CheckpointSummary, PairSummary, TensorFacts

# Each name is imported on first use: the CLI imports .command to build its parser, and
# .build pulls in the diff engine, which no other command needs.
_HOME = {
    "Anomaly": ".summaries",
    "CheckpointSummary": ".summaries",
    "PairSummary": ".summaries",
    "SummaryCache": ".cache",
    "TensorFacts": ".summaries",
    "Timeline": ".result",
    "build_timeline": ".build",
    "default_cache_dir": ".cache",
}


# The package root's lazy __getattr__ again (PEP 562 needs it in each module; no layer both
# may import holds a shared one).
def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


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
