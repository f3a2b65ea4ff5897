"""Conversions: planned, streamed, atomic and verified bit for bit (see ``plan_conversion``)."""

from .plan_types import ConversionPlan, PlannedFile, PlannedTensor
from .planner import DestinationExistsError, plan_conversion
from .runner import ConversionResult, run_conversion
from .writers import ConversionCancelled, parse_size

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
