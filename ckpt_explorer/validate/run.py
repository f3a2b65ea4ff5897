"""``Run``: one validation under way, what every area's step reads and adds to."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..contracts import ProgressFn
from ..io.location import Location
from ..view import CheckpointView
from .findings import Finding
from .numeric import TensorStats
from .parts import Components, OptimizerPart, ValuesPart


@dataclass
class Run:
    """One validation under way: its input, options, and what the steps found and built."""

    root: Location
    given: CheckpointView | None
    model_view: CheckpointView | None
    numeric: bool
    hf_load: bool
    progress: ProgressFn | None
    view: CheckpointView | None = None
    findings: list[Finding] = field(default_factory=list)
    parts: Components = field(default_factory=Components)
    stats: dict[str, TensorStats] | None = None
    pairs: list[tuple[OptimizerPart | None, ValuesPart | None]] = field(default_factory=list)

    @property
    def opened(self) -> CheckpointView:
        assert self.view is not None
        return self.view

    @property
    def training_state(self) -> bool:
        return self.opened.kind == "training_state"
