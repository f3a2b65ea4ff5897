"""The smaller views: ``.npy`` object arrays and the pickled values of ColossalAI's flattened
optimizer safetensors (tar archives are in :mod:`.views_archive`, compressed streams in
:mod:`.views_compressed`).

Each is read with the consumer's own parser where that parser is safe to run on hostile bytes
(numpy's header reader evaluates only a literal).
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

from ..io.safetensors_seen import checked_header, plain_metadata
from .judged import Judged, Stream
from .known_formats import npy_dtype
from .zip_check import BufferFile

_MAX_SAFETENSORS_HEADER = 100 * 2**20


# --- numpy ----------------------------------------------------------------------------------


def judge_npy(buf: Any, start: int, end: int, where: str, scope: Any) -> Any:
    """An ``.npy``'s object array: ``numpy.load(allow_pickle=True)`` unpickles what follows the
    header (read here by numpy's own header reader, which evaluates only a literal)."""
    out = Judged()
    try:
        f = io.BufferedReader(BufferFile(buf, start, end))
        dtype = npy_dtype(f)
    except Exception:  # numpy's own reader refuses it: numpy.load fails, nothing unpickled
        return out
    out.formats.append("npy")
    if dtype.hasobject:
        at = start + f.tell()
        walk = scope.walk(buf, at, end)
        out.streams.append(
            Stream(f"{where}, its object array (numpy.load allow_pickle)", walk, buf)
        )
    return out


# --- ColossalAI's flattened optimizer safetensors ------------------------------------------


def _plainly_without_values(raw: bytes) -> bool:
    """The header is a JSON object whose ``__metadata__`` (an object, or absent) lists no
    ``non_tensor_keys``: decided by the listing's own checks of these bytes, done once per
    process (the listing then reuses them), instead of a second ``json.loads``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    checked = checked_header(raw, text) if text.startswith("{") else None
    metadata = None if checked is None else plain_metadata(raw, checked)
    return metadata is not None and "non_tensor_keys" not in metadata


def judge_safetensors_values(
    buf: Any, start: int, end: int, where: str, head: bytes, scope: Any
) -> Any:
    """The values ColossalAI lists under ``non_tensor_keys`` are pickles stored as U8 tensors;
    its loader unpickles each."""
    out = Judged()
    if len(head) < 9 or head[8:9] != b"{":
        return out
    (n,) = struct.unpack("<Q", head[:8])
    if n > _MAX_SAFETENSORS_HEADER or 8 + n > end - start:
        return out
    raw = bytes(buf[start + 8 : start + 8 + n])
    if _plainly_without_values(raw):
        out.formats.append("safetensors")
        return out  # what json.loads would give: no pickled values to judge
    try:
        header = json.loads(raw)
        keys = json.loads(header.get("__metadata__", {}).get("non_tensor_keys", "[]"))
    except (ValueError, AttributeError, TypeError, RecursionError):
        return out
    out.formats.append("safetensors")
    if not isinstance(keys, list):
        return out
    base = start + 8 + n
    for key in keys:
        entry = header.get(key) if isinstance(key, str) else None
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) for o in offsets)
        ):
            continue
        a, b = base + offsets[0], min(base + offsets[1], end)
        walk = scope.walk(buf, a, b)
        if walk.did_anything:
            out.streams.append(Stream(f"{where} (pickled value {key!r})", walk, buf))
    return out
