"""State of the Layout view: the asked layout (a form) and ``fit``'s report for the open view.

The figures come from :mod:`ckpt_explorer.fit` (checks, memory per GPU, the tp x pp grid);
nothing is recomputed here. Bad input gives one error line and leaves the last report.
"""

from __future__ import annotations

import threading
from typing import Any

import param

from ..errors import CkptExplorerError
from .job_states import JobState
from .jobs import Job

DEFAULT_ZERO = "plugin default"
ZERO_CHOICES = [DEFAULT_ZERO, "0", "1", "2", "3"]
FORM = ("tp", "pp", "ep", "zero", "plugin", "gpus", "gpu_mem", "dtype")


class FitState(JobState):
    """The layout asked about and ``fit``'s verdict on the open checkpoint."""

    tp = param.Integer(default=1, doc="tensor-parallel size")
    pp = param.Integer(default=1, doc="pipeline-parallel size")
    ep = param.Integer(default=1, doc="expert-parallel size")
    zero: str = param.Selector(  # type: ignore[assignment]
        default=DEFAULT_ZERO, objects=ZERO_CHOICES, doc="ZeRO stage"
    )
    plugin: str = param.Selector(  # type: ignore[assignment]
        default="hybrid", objects=["hybrid", "gemini", "lowlevelzero", "ddp", "fsdp"]
    )
    gpus = param.Integer(default=0, doc="total GPUs; 0: tp x pp x ep")
    gpu_mem = param.String(default="80GB", doc="memory per GPU (80GB, 80GiB; empty: no limit)")
    dtype: str = param.Selector(  # type: ignore[assignment]
        default="bf16", objects=["bf16", "fp16", "fp32"]
    )
    report = param.Parameter(default=None, doc="FitReport of the last run")
    checkpoint = param.String(default="", doc="the checkpoint the report is of")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._gen = 0
        self._lock = threading.Lock()

    def layout(self) -> Any:
        """The form as a :class:`~ckpt_explorer.fit.Layout`.

        Raises:
            CkptExplorerError: a size below 1, a negative GPU count or an unreadable memory size.
        """
        from ..fit import Layout, parse_size

        for name in ("tp", "pp", "ep"):
            value = getattr(self, name)
            if value is None or value < 1:
                raise CkptExplorerError(
                    None, f"{name} a whole number >= 1", repr(value), f"set {name} to 1 or more"
                )
        if self.gpus is not None and self.gpus < 0:
            raise CkptExplorerError(None, "GPUs >= 0 (0: tp x pp x ep)", repr(self.gpus), "")
        try:
            mem = parse_size(self.gpu_mem) if self.gpu_mem.strip() else None
        except ValueError as e:
            raise CkptExplorerError(
                None,
                "GPU memory like 80GB or 80GiB",
                repr(self.gpu_mem),
                "type a size with a unit, or leave it empty for no limit",
            ) from e
        zero = None if self.zero == DEFAULT_ZERO else int(self.zero)
        gpus = self.gpus or None
        return Layout(self.tp, self.pp, self.ep, zero, self.plugin, gpus, mem, self.dtype)

    def run(self, view: Any, wait: bool = False, path: str = "") -> None:
        """``fit`` of ``view`` (``path``: its name, said with the report) at the form's layout,
        in the background; a newer run wins."""
        with self._lock:
            self._gen += 1
            gen = self._gen
        if view is None:
            self.param.update(report=None, error="", running=False, message="", checkpoint="")
            return
        try:
            layout = self.layout()
        except CkptExplorerError as e:
            self.fail(e.one_line())
            return

        def work(_cancel: threading.Event) -> Any:
            from ..fit import fit_checkpoint

            return fit_checkpoint(view, layout)

        def done(report: Any) -> None:
            if gen == self._gen:
                self.param.update(report=report, checkpoint=path)
                self.finish(f"tp {layout.tp} x pp {layout.pp} x ep {layout.ep}")

        def failed(msg: str) -> None:
            if gen == self._gen:
                self.fail(msg)

        self.begin(f"checking the layout of {path}" if path else "checking the layout")
        self.job = Job(work, done, failed, name="ckpt-explorer-fit").start()
        if wait:
            self.job.join()
