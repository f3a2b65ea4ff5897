"""The safetensors header checks of :mod:`.safetensors_header`, column by column.

A header of 90,000 tensors was checked entry by entry in Python (~5 µs a tensor). Here the
same rules run over whole columns with builtins that loop in C (``map``, ``set``, list
equality), and the header becomes columns (names, dtypes, shapes, begins, ends) without a
Python object per entry beyond its fields. Two ways in, tried in turn:

- **compact**: the reference writer's compact JSON (no whitespace, each entry's keys in
  ``dtype, shape, data_offsets`` order) is split by one regular expression into its fields
  and the separators between entries; the separators must be exactly ``,`` (and ``{``, an
  optional leading ``"__metadata__":{...},``, ``}``), so the entries tile the whole text.
  Shapes and offsets are then parsed as JSON in one call each, which rejects what JSON
  rejects (leading zeros, empty items), and the names must be unique.
- **parsed**: any other header is parsed by ``json.loads`` without a hook per object, and
  duplicate keys (which ``json.loads`` would silently collapse) are ruled out by counting:
  in JSON without escapes every ``:`` is either a key's separator or a character of a
  string, so a document whose parsed keys and strings account for every ``:`` of the text
  dropped none.

Anything unusual — a backslash escape, a control character, an extra key, a wrong type, a
gap — answers None, and the entry-by-entry checks run instead to say what is wrong, so a
header is accepted here only if they would accept it too, with the same entries.
"""

from __future__ import annotations

import json
import math
import operator
import re
from functools import partial
from itertools import chain, repeat
from typing import Any, NamedTuple

from .safetensors_dtypes import HeaderEntry

_FIELDS = operator.itemgetter("dtype", "shape", "data_offsets")
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_NEW_ENTRY = partial(tuple.__new__, HeaderEntry)  # what HeaderEntry._make does, minus a call
# One entry of a compact header; fields are checked after the split (see _compact).
_ENTRY = re.compile(
    r'"([^"]*)":\{"dtype":"([^"]*)","shape":\[([0-9,]*)\],"data_offsets":\[([0-9]+),([0-9]+)\]\}'
)
_CONTROL = bytes(range(32))  # invalid in a JSON string; whitespace elsewhere
_METADATA = '{"__metadata__":'


class HeaderColumns(NamedTuple):
    """The entries of a header as columns, in header order (shapes as parsed lists)."""

    names: list[str]
    dtypes: list[str]  # safetensors spellings, e.g. "BF16"
    shapes: list[list[int]]
    begins: list[int]  # relative to the data buffer
    ends: list[int]

    def entries(self) -> list[HeaderEntry]:
        rows = zip(
            self.names, self.dtypes, map(tuple, self.shapes), self.begins, self.ends, strict=True
        )
        return list(map(_NEW_ENTRY, rows))


Checked = tuple[HeaderColumns, dict[str, str]]


def checked_columns(raw: bytes, text: str, dtypes: dict[str, tuple[str, int]]) -> Checked | None:
    """(columns, metadata) when the header ``raw`` (decoded: ``text``) is well formed, else
    None (the caller then checks entry by entry, to say what is wrong)."""
    if b"\\" in raw:
        return None
    if len(raw.translate(None, _CONTROL)) == len(raw):  # (a C loop; a regex took 10x)
        found = _compact(text, dtypes)
        if found is not None:
            return found
    return _parsed(raw, text, dtypes)


def checked_entries(
    raw: bytes, text: str, dtypes: dict[str, tuple[str, int]]
) -> tuple[list[HeaderEntry], dict[str, str]] | None:
    """:func:`checked_columns` as a list of entries."""
    found = checked_columns(raw, text, dtypes)
    return None if found is None else (found[0].entries(), found[1])


def _compact(text: str, dtypes: dict[str, tuple[str, int]]) -> Checked | None:
    parts = _ENTRY.split(text)  # [separator, 5 fields, separator, 5 fields, ..., separator]
    n = len(parts) // 6
    if not n:
        return None
    separators = parts[0::6]
    if separators[-1].rstrip(" ") != "}" or separators[1:-1] != [","] * (n - 1):
        return None
    metadata: dict[str, str] = {}
    if separators[0] != "{":
        lead = separators[0]
        if not (lead.startswith(_METADATA) and lead.endswith(",")):
            return None
        found = _metadata(lead[len(_METADATA) : -1])
        if found is None:
            return None
        metadata = found
    names = parts[1::6]
    if len(set(names)) != n or "__metadata__" in names:
        return None
    try:
        shapes = json.loads("[[" + "],[".join(parts[3::6]) + "]]")
        begins = json.loads("[" + ",".join(parts[4::6]) + "]")
        ends = json.loads("[" + ",".join(parts[5::6]) + "]")
    except ValueError:  # a leading zero or an empty size: not JSON
        return None
    columns = HeaderColumns(names, parts[2::6], shapes, begins, ends)
    return (columns, metadata) if _sizes_fit(columns, dtypes) else None


def _metadata(text: str) -> dict[str, str] | None:
    """A JSON object of strings without duplicate keys, else None."""
    try:
        pairs = json.loads(text, object_pairs_hook=list)
    except (ValueError, RecursionError):
        return None
    if type(pairs) is not list or not _all_type(pairs, tuple):  # tuples: the hook's pairs
        return None
    if not _all_type(chain.from_iterable(pairs), str):
        return None
    found = dict(pairs)
    return found if len(found) == len(pairs) else None


def _parsed(raw: bytes, text: str, dtypes: dict[str, tuple[str, int]]) -> Checked | None:
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
    if not set(map(len, infos)) <= {3}:
        return None
    try:
        fields = list(map(_FIELDS, infos))
    except KeyError:
        return None
    if not fields:
        return HeaderColumns([], [], [], [], []), metadata
    kinds, shapes, offsets = zip(*fields, strict=True)
    if not _all_type(shapes, list) or not _all_type(offsets, list):
        return None
    sizes = list(chain.from_iterable(shapes))
    if not _all_type(sizes, int) or (sizes and min(sizes) < 0):
        return None
    if not set(map(len, offsets)) <= {2}:
        return None
    begins, ends = list(map(_FIRST, offsets)), list(map(_SECOND, offsets))
    if not _all_type(chain(begins, ends), int) or min(begins) < 0:
        return None
    columns = HeaderColumns(names, list(kinds), list(shapes), begins, ends)
    return (columns, metadata) if _sizes_fit(columns, dtypes) else None


def _sizes_fit(c: HeaderColumns, dtypes: dict[str, tuple[str, int]]) -> bool:
    """Known dtypes, bytes = elements x bits / 8 for each entry, and the data buffer covered
    without holes or overlaps (begins are non-negative ints here)."""
    try:
        kinds = set(c.dtypes)
    except TypeError:  # an unhashable dtype
        return False
    if not kinds <= dtypes.keys():
        return False
    sizes = list(map(operator.sub, c.ends, c.begins))
    numels = map(math.prod, c.shapes)
    if all(dtypes[k][1] % 8 == 0 for k in kinds):  # whole bytes: elements x bytes each
        each = {k: v[1] // 8 for k, v in dtypes.items()}.__getitem__
        if list(map(operator.mul, numels, map(each, c.dtypes))) != sizes:
            return False  # (so every end >= its begin: elements are never negative)
    else:
        bits = list(map(operator.mul, numels, map(_bits(dtypes), c.dtypes)))
        if list(map(operator.mul, sizes, repeat(8))) != bits:
            return False
    if c.begins[0] == 0 and c.begins[1:] == c.ends[:-1]:
        return True  # contiguous in header order (the writers' case)
    spans = sorted(zip(c.begins, c.ends, strict=True))
    return list(map(_FIRST, spans)) == [0, *map(_SECOND, spans[:-1])]


def _bits(dtypes: dict[str, tuple[str, int]]) -> Any:
    """dtype -> bits per element, as a C-level lookup."""
    return {k: v[1] for k, v in dtypes.items()}.__getitem__


def _all_type(values: Any, kind: type) -> bool:
    """Every value is exactly of ``kind`` (not a subclass: ``True`` is no size)."""
    return set(map(type, values)) <= {kind}
