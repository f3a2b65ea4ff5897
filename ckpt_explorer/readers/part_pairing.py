"""Which model an optimizer (and a scheduler) of a training-state folder belongs to.

accelerate's ``save_state`` numbers what ``prepare`` was given, in order: ``model.safetensors``
(or ``pytorch_model.bin``), ``model_1.safetensors``, ...; ``optimizer.bin``, ``optimizer_1.bin``;
``scheduler.bin``, ``scheduler_1.bin``. With two models (a GAN's generator and discriminator)
optimizer k belongs to model k; the pairing holds only where every name carries its number.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_NUMBERED = re.compile(r"^(?:pytorch_)?(?:model|optimizer|scheduler)(?:_(\d+))?(?:\.[a-z]+)?/?$")


def save_index(name: str) -> int | None:
    """0 for ``model`` / ``optimizer.bin`` / ``scheduler.bin``, k for ``..._k``; None for any
    other name."""
    m = _NUMBERED.match(name.rsplit("/", 2)[-2] if name.endswith("/") else name.rsplit("/", 1)[-1])
    if m is None:
        return None
    return int(m.group(1)) if m.group(1) else 0


def paired(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate numbered like ``name`` when there are several numbered candidates and one
    carries ``name``'s number; None otherwise (the caller's usual choice stands)."""
    index = save_index(name)
    numbered = {save_index(c): c for c in candidates}
    numbered.pop(None, None)
    if index is None or len(numbered) < 2:
        return None
    return numbered.get(index)
