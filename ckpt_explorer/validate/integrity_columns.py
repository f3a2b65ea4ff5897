"""The index rules' common case, decided over whole columns (a 90,000-tensor index).

:mod:`.integrity` parses the index again with a hook that sees every key (to name duplicate
entries), builds a set of names per shard and walks every record for ``total_size``; at
frontier scale that was most of ``validate --no-numeric``. Here the same answers come from
the listing's own parse of the index — when counting shows that no key was collapsed — and
from the records' columns, with C-level passes. Each function answers None where it cannot
decide, and the rule takes its general path.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from itertools import compress
from typing import Any

from ..errors import CkptExplorerError
from ..io.location import Location
from ..readers.hf.sharded_index import read_index_json
from ..record_table import RecordTable, record_column
from ..types import TensorRecord


def index_without_duplicates(path: Location) -> dict[str, Any] | None:
    """The index document when no key of it repeats (then ``json.loads`` lost nothing):
    the listing's cached parse. None when that is not certain (escapes, a count that does
    not add up, a document the listing refuses)."""
    try:
        raw = path.read_bytes()
        doc = read_index_json(path)
    except (CkptExplorerError, OSError):
        return None
    # without escapes every ':' of the text separates a key from its value or lies in a string
    if b"\\" in raw or raw.count(b":") != _colons(doc):
        return None
    return doc


def _colons(value: Any) -> int:
    """Keys, and ':' inside keys and strings, of a parsed JSON value."""
    if isinstance(value, str):
        return value.count(":")
    if isinstance(value, dict):
        keys, values = list(value), list(value.values())
        n = len(keys) + "".join(keys).count(":")
        if set(map(type, values)) <= {str}:  # a weight_map: one C-level pass
            return n + "".join(values).count(":")
        return n + sum(map(_colons, values))
    if isinstance(value, list):
        return sum(map(_colons, value))
    return 0


def all_in_place(
    weight_map: Mapping[str, str], contents: Mapping[str, Sequence[TensorRecord]]
) -> bool:
    """Every tensor the index names is held by its shard (shards not read are skipped)."""
    held = {rel: set(record_column(records, "name")) for rel, records in contents.items()}
    shards = list(weight_map.values())
    if set(shards) <= held.keys():
        return all(map(operator.contains, map(held.__getitem__, shards), weight_map))
    return all(name in held[rel] for name, rel in weight_map.items() if rel in held)


def counted_bytes(
    weight_map: Mapping[str, str], contents: Mapping[str, Sequence[TensorRecord]]
) -> list[int] | None:
    """[bytes of the tensors the index names, the same without aliases, bytes of all] of a
    model's shards when no record names a shared storage (so nothing aliases); else None."""
    tables = [RecordTable.from_records(records) for records in contents.values()]
    if any(t.aliasing_possible() for t in tables):
        return None
    listed = every = 0
    for t in tables:
        nbytes = t.column("nbytes")
        every += sum(nbytes)
        listed += sum(compress(nbytes, map(weight_map.__contains__, t.column("name"))))
    return [listed, listed, every]
