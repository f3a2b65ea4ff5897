"""Safetensors headers checked once per process, remembered by their bytes.

``validate`` judges every file for the security gate before it lists the checkpoint; the
gate parsed each header with ``json.loads`` (to find ColossalAI's pickled
``non_tensor_keys``) and the listing parsed it again. Both now ask :func:`checked_header`,
which runs the column-wise checks of :mod:`.safetensors_fast` once for given header bytes
and remembers the answer (bounded: the oldest are forgotten past 64 MiB of headers).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .safetensors_fast import Checked

MAX_BYTES = 64 * 2**20

_seen: OrderedDict[bytes, Checked] = OrderedDict()
_held = 0
_lock = threading.Lock()


def checked_header(raw: bytes, text: str) -> Checked | None:
    """(columns, metadata) of well-formed header bytes ``raw`` (decoded: ``text``), from
    :func:`.safetensors_fast.checked_columns` — once per distinct bytes — else None."""
    global _held
    with _lock:
        found = _seen.get(raw)
    if found is not None:
        return found
    from .safetensors_dtypes import DTYPES
    from .safetensors_fast import checked_columns

    found = checked_columns(raw, text, DTYPES)
    if found is None or len(raw) > MAX_BYTES:
        return found
    with _lock:
        if raw not in _seen:
            _seen[raw] = found
            _held += len(raw)
            while _held > MAX_BYTES:
                old, _ = _seen.popitem(last=False)
                _held -= len(old)
    return found


def plain_metadata(raw: bytes, checked: Checked) -> dict[str, str] | None:
    """The metadata ``json.loads(raw)`` has under ``__metadata__`` (``{}`` when absent) for a
    header :func:`checked_header` accepted, when that is certain; None when the bytes hold an
    empty object or a null there (the checks read both as no metadata)."""
    metadata = checked[1]
    if not metadata and b'"__metadata__"' in raw:  # no escapes: the key is spelt plainly
        return None
    return metadata
