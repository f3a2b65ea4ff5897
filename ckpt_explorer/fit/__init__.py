"""Will a checkpoint load at a parallel layout (TP / PP / EP / ZeRO), and fit in GPU memory?

Knows no plugin code: the rules are ColossalAI 0.5.0's ShardFormer / plugin checks restated.
"""

from __future__ import annotations

from ..readable import parse_size
from .arch import ArchFacts, read_arch
from .checks import Check, run_checks
from .layout import Layout
from .report import FitReport, fit_checkpoint

__all__ = [
    "ArchFacts",
    "Check",
    "FitReport",
    "Layout",
    "fit_checkpoint",
    "parse_size",
    "read_arch",
    "run_checks",
]
