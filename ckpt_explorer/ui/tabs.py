"""The dashboard's tabs, in order: adding a tab is one line here.

Each entry is ``(tab title, "module:Class")`` under :mod:`ckpt_explorer.ui.components`; the
class is a Panel ``Viewer`` built as ``Class(app=AppState)``. Light to import (no panel).
"""

from __future__ import annotations

import importlib
from typing import Any

TAB_CLASSES: list[tuple[str, str]] = [
    ("Overview", "overview:Overview"),
    ("Weight map", "weight_map:WeightMap"),
    ("Optimizer", "optimizer:OptimizerView"),
    ("Compare", "compare:CompareView"),
    ("Validate", "validate:ValidateView"),
    ("Resume doctor", "resume:ResumeView"),
    ("Convert", "convert:ConvertView"),
    ("Layout", "layout_view:LayoutView"),
    ("Timeline", "timeline_view:TimelineView"),
]
TABS = tuple(name for name, _ in TAB_CLASSES)


def tab_class(spec: str) -> Any:
    """The component class of a ``"module:Class"`` entry."""
    module, _, cls = spec.partition(":")
    return getattr(importlib.import_module(f"{__package__}.components.{module}"), cls)
