"""The safetensors header checks of :mod:`.safetensors_header`, column by column.

A header of 90,000 tensors was checked entry by entry in Python (~5 µs a tensor). Here the
same rules run over whole columns with builtins that loop in C (``map``, ``set``, list
equality), and the JSON is parsed without a Python hook per object. Anything unusual — a
backslash escape, an extra key, a wrong type, a gap — answers None, and the entry-by-entry
checks run instead to say what is wrong, so a header is accepted here only if they would
accept it too, with the same entries.

Duplicate keys (which ``json.loads`` would silently collapse) are ruled out by counting: in
JSON without escapes every ``:`` is either a key's separator or a character of a string, so
a document whose parsed keys and strings account for every ``:`` of the text dropped none.
"""

from __future__ import annotations

import json
import math
import operator
from functools import partial
from itertools import chain
from typing import Any

from .safetensors_dtypes import HeaderEntry

_FIELDS = operator.itemgetter("dtype", "shape", "data_offsets")
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_NEW_ENTRY = partial(tuple.__new__, HeaderEntry)  # what HeaderEntry._make does, minus a call


def checked_entries(
    raw: bytes, text: str, dtypes: dict[str, tuple[str, int]]
) -> tuple[list[HeaderEntry], dict[str, str]] | None:
    """(entries in header order, metadata) when the header is well formed, else None."""
    if b"\\" in raw:
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if type(doc) is not dict:
        return None
    keys = len(doc)
    metadata = doc.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    elif type(metadata) is not dict or not _all_type(chain(metadata, metadata.values()), str):
        return None
    names, infos = list(doc), list(doc.values())
    colons = keys + len(metadata) + 3 * len(infos)
    colons += "".join(chain(names, metadata, metadata.values())).count(":")
    if raw.count(b":") != colons or not _all_type(infos, dict):
        return None
    if any(len(i) != 3 for i in infos):
        return None
    try:
        fields = list(map(_FIELDS, infos))
    except KeyError:
        return None
    entries = _columns(names, fields, dtypes)
    return None if entries is None else (entries, metadata)


def _columns(
    names: list[str], fields: list[tuple[Any, Any, Any]], dtypes: dict[str, tuple[str, int]]
) -> list[HeaderEntry] | None:
    """The entries of ``names`` from their (dtype, shape, data_offsets), or None."""
    if not fields:
        return []
    kinds, shapes, offsets = zip(*fields, strict=True)
    try:
        if not set(kinds) <= dtypes.keys():
            return None
    except TypeError:  # an unhashable dtype
        return None
    if not _all_type(shapes, list) or not _all_type(offsets, list):
        return None
    sizes = list(chain.from_iterable(shapes))
    if not _all_type(sizes, int) or (sizes and min(sizes) < 0):
        return None
    if any(len(o) != 2 for o in offsets):
        return None
    begins, ends = list(map(_FIRST, offsets)), list(map(_SECOND, offsets))
    if not _all_type(chain(begins, ends), int) or min(begins) < 0:
        return None
    bits = list(map(operator.mul, map(math.prod, shapes), (dtypes[k][1] for k in kinds)))
    if any(b % 8 for b in bits) or [b // 8 for b in bits] != list(map(operator.sub, ends, begins)):
        return None
    spans = sorted(zip(begins, ends, strict=True))
    if list(map(_FIRST, spans)) != [0, *map(_SECOND, spans[:-1])]:
        return None  # a gap or an overlap
    return list(map(_NEW_ENTRY, zip(names, kinds, map(tuple, shapes), begins, ends, strict=True)))


def _all_type(values: Any, kind: type) -> bool:
    """Every value is exactly of ``kind`` (not a subclass: ``True`` is no size)."""
    return set(map(type, values)) <= {kind}
