"""Conversions: planned, streamed, atomic and verified bit for bit (see ``plan_conversion``).

The names below are imported on first use, so that reading the target table
(:mod:`ckpt_explorer.convert.targets`, the CLI's ``--to`` choices) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .plan_types import ConversionPlan, PlannedFile, PlannedTensor
    from .planner import DestinationExistsError, plan_conversion
    from .runner import ConversionResult, run_conversion
    from .writers import ConversionCancelled, parse_size

_WHERE = {
    "ConversionCancelled": "writers",
    "ConversionPlan": "plan_types",
    "ConversionResult": "runner",
    "DestinationExistsError": "planner",
    "PlannedFile": "plan_types",
    "PlannedTensor": "plan_types",
    "parse_size": "writers",
    "plan_conversion": "planner",
    "run_conversion": "runner",
}

__all__ = [
    "ConversionCancelled",
    "ConversionPlan",
    "ConversionResult",
    "DestinationExistsError",
    "PlannedFile",
    "PlannedTensor",
    "parse_size",
    "plan_conversion",
    "run_conversion",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
