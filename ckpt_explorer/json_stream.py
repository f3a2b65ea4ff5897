"""Write a large JSON report as it is made: indented, its long lists one item a line.

``json.dump(doc, out, indent=2)`` runs the pure-Python encoder (the C one only serves
``indent=None``) and held a 90k-tensor ``inspect --json`` for seconds. Here each top-level
value is encoded by ``json.dumps`` and written at once, and the lists named in ``lines`` are
written item by item from already-encoded JSON texts (see :func:`tensor_lines`), a block at
a time. The result parses to the same document as ``json.dump`` writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain, islice
from json.encoder import encode_basestring_ascii as _text
from typing import Any, TextIO

from .record_table import record_column
from .types import TensorRecord

BLOCK = 4096  # items per write


def write_json(doc: Mapping[str, Any], out: TextIO, lines: Mapping[str, Iterable[str]]) -> None:
    """Write ``doc`` as JSON with a 2-space indent; the value of each key of ``lines`` is the
    list of those encoded items instead (one a line), whatever ``doc`` holds there."""
    out.write("{")
    for i, (key, value) in enumerate(doc.items()):
        out.write(("," if i else "") + "\n  " + _text(str(key)) + ": ")
        if key in lines:
            _write_list(out, iter(lines[key]))
        else:
            out.write(json.dumps(value, indent=2).replace("\n", "\n  "))
    out.write("\n}\n" if doc else "}\n")


def _write_list(out: TextIO, items: Iterator[str]) -> None:
    first = True
    while block := list(islice(items, BLOCK)):
        out.write(("[\n    " if first else ",\n    ") + ",\n    ".join(block))
        first = False
    out.write("[]" if first else "\n  ]")


def tensor_lines(records: Sequence[TensorRecord]) -> Iterator[str]:
    """``json.dumps(inspect_report.tensor_entry(r))`` of each record, without the dicts: column
    by column (a Python ``int``'s ``str`` and a list of them are their JSON text)."""
    columns = _columns(records)
    sizes = list(chain.from_iterable(columns[2]))
    if not records or not set(map(type, chain(sizes, columns[3]))) <= {int}:
        yield from (_TENSOR % _safe_fields(r) for r in records)
        return
    names, dtypes, shapes, nbytes, files, offsets = columns
    texts = {s: _text(s) for s in {*dtypes, *files}}  # few distinct values
    if not _all_lists(shapes):
        shapes = list(map(list, shapes))
    if set(map(type, offsets)) <= {int}:
        offsets = list(map(str, offsets))
    else:
        offsets = ["null" if o is None else str(int(o)) for o in offsets]
    yield from map(
        _TENSOR.__mod__,
        zip(
            map(_text, names),
            map(texts.__getitem__, dtypes),
            map(str, shapes),
            map(str, nbytes),
            map(texts.__getitem__, files),
            offsets,
            strict=True,
        ),
    )


_TENSOR = '{"name": %s, "dtype": %s, "shape": %s, "nbytes": %s, "file": %s, "offset": %s}'


def _columns(records: Sequence[TensorRecord]) -> list[Sequence[Any]]:
    """(names, dtypes, shapes, nbytes, files, offsets) of ``records``, as columns."""
    fields = ("name", "dtype", "shape", "nbytes", "file", "offset")
    return [record_column(records, f) for f in fields]


def _all_lists(values: Sequence[Any]) -> bool:
    return set(map(type, values)) <= {list}


def _safe_fields(r: TensorRecord) -> tuple[str, ...]:
    offset = "null" if r.offset is None else str(int(r.offset))
    shape = str([int(d) for d in r.shape])
    return (_text(r.name), _text(r.dtype), shape, str(int(r.nbytes)), _text(r.file), offset)
