"""State of the Timeline's "one tensor over steps" block: the tensor, its distribution job.

The figures are :func:`ckpt_explorer.timeline.distribution.tensor_distribution`'s, computed in
the background over the timeline built by :class:`~.timeline_state.TimelineState`.
"""

from __future__ import annotations

import threading
from typing import Any

import param

from ..contracts import Progress
from .job_states import JobState
from .jobs import Job, Throttle
from .numbers import plural
from .timeline_state import TimelineState


class DistributionState(JobState):
    """One tensor's distribution over the checkpoints of the timeline shown."""

    tensor = param.String(default="", doc="the tensor, as the timeline names it")
    names = param.List(default=[], item_type=str, doc="model tensors of the run")
    result = param.Parameter(default=None, doc="TensorDistribution of the last run")
    want = param.Boolean(default=False, doc="run for `tensor` once a timeline is built (a link)")

    def __init__(self, timeline: TimelineState, **params: Any) -> None:
        super().__init__(**params)
        self.timeline = timeline
        self._gen = 0
        self._lock = threading.Lock()
        timeline.param.watch(self._new_timeline, "timeline")
        self._new_timeline()

    def _new_timeline(self, *_: Any) -> None:
        from ..timeline.distribution import model_tensor_names

        t = self.timeline.timeline
        names = model_tensor_names(t) if t is not None else []
        with self._lock:
            self._gen += 1
        if self.job is not None:
            self.job.cancel()
        keep = self.tensor if self.tensor in names or not names else names[0]
        asked = self.want and t is not None and self.tensor in names
        self.param.update(names=names, tensor=keep, result=None, error="", message="")
        if t is not None:
            self.want = False
        if asked:
            self.run()

    def run(self, wait: bool = False) -> None:
        """The distribution of ``tensor`` over the timeline's checkpoints, in the background."""
        from ..timeline.distribution import tensor_distribution

        t = self.timeline.timeline
        name = self.tensor.strip()
        if t is None or not name:
            self.fail("Build the timeline first, then pick a tensor." if t is None else "")
            return
        with self._lock:
            self._gen += 1
            gen = self._gen
        if self.job is not None and self.job.running:
            self.job.cancel()
        tick = Throttle(
            lambda d, n: self.report(d / n if n else 1.0, f"{d} of {plural(n, 'checkpoint')} read"),
            0.1,
        )

        def progress(e: Progress) -> None:
            tick(e.done, e.total, force=e.done == e.total)

        def work(cancel: threading.Event) -> Any:
            return tensor_distribution(t, name, progress=progress, cancel=cancel)

        def done(d: Any) -> None:
            if gen != self._gen:
                return
            self.result = d
            read = sum(1 for c in d.counts if c)
            cut = self.job is not None and self.job.cancel_event.is_set()
            note = " (cancelled)" if cut else ""
            self.finish(f"{name}: {plural(read, 'checkpoint')}{note}")

        def failed(msg: str) -> None:
            if gen == self._gen:
                self.fail(msg)

        self.result = None
        self.begin(f"reading {name} in each checkpoint")
        self.job = Job(work, done, failed, name="ckpt-explorer-distribution").start()
        if wait:
            self.job.join()
