"""Findings of a quantized export: its ``quantization_config`` against its files.

The reader (:mod:`..readers.quantized.checks`) compares the config with the stored parts; each
of its findings becomes a :class:`Finding` here: stored parts whose sizes disagree with the
scheme are errors (the runtime's loader rejects or misreads them), a module quantized although
the config ignores it, or targeted but kept in float, a warning.
"""

from __future__ import annotations

from ..readers.quantized.checks import RULE_PARTS
from ..readers.quantized.folder import QUANT_KEY
from ..view import CheckpointView
from .findings import Finding

HINT = "re-export with the config the files were written with, or fix quantization_config"


def check_quantized(view: CheckpointView) -> list[Finding]:
    info = view.values.get(QUANT_KEY)
    if not isinstance(info, dict):
        return []
    found = []
    for check in info.get("checks", []):
        rule = str(check["rule"])  # one of the reader's RULE_* ids (catalogued)
        severity = "error" if rule == RULE_PARTS else "warning"
        tensor = f"{check['module']}.weight"
        found.append(Finding(rule, severity, check["message"], HINT, tensor=tensor))
    return found
