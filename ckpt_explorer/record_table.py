"""The tensor records of a view, kept as columns and made into records only when asked for.

Listing a 90,000-tensor checkpoint made 90,000 :class:`~.types.TensorRecord` objects (and a
``read_values`` each) that ``inspect`` never looked at: it shows a count, sums and the first rows.
A :class:`RecordTable` holds what a reader parsed as columns (names, dtypes, shapes, sizes,
files, offsets, and the mapped file each tensor loads from); summaries read the columns,
and a record is made the first time it is asked for — one by index or name, all of them at
the first iteration (then kept, so every later pass sees the same objects). Reordering
(:meth:`RecordTable.take`) keeps the permutation and applies it to a column when that
column is first read.

A table made from records (every reader that builds them anyway: pickles, DCP, ...) keeps
them as they are and serves its columns from them.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import operator
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, overload

from .io.mapped import MappedFile, MappedTensor
from .types import TensorRecord

# What a column-born table stores; its records have no storage key and load from `mapped`.
COLUMNS = ("name", "dtype", "shape", "nbytes", "file", "offset", "mapped")
STORED = ("name", "dtype", "shape", "nbytes", "file", "offset", "storage_key", "read_values")
_NEW_READ_VALUES = functools.partial(tuple.__new__, MappedTensor)  # MappedTensor._make, in C


@functools.cache
def _defaults() -> dict[str, Any]:
    """TensorRecord's fields beyond :data:`STORED`, each with its default."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(TensorRecord)[len(STORED) :]:
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:  # pragma: no cover - a required field would need a column here
            raise TypeError(f"TensorRecord.{f.name} has no default; RecordTable must store it")
    return out


def _records(rows: Iterable[tuple[Any, ...]]) -> list[TensorRecord]:
    """``[TensorRecord(*row) for row in rows]`` without the frozen dataclass's per-field
    ``object.__setattr__`` (the same objects: they compare, hash, print and ``replace``
    alike)."""
    extra = _defaults()
    new, assign, out = object.__new__, object.__setattr__, []
    for row in rows:
        obj = new(TensorRecord)
        state = dict(zip(STORED, row))  # noqa: B905 (rows give every stored field)
        if extra:
            state.update(extra)
        assign(obj, "__dict__", state)
        out.append(obj)
    return out


class RecordTable(Sequence[TensorRecord]):
    """A sequence of :class:`~.types.TensorRecord` kept as columns (see the module's text).

    It behaves as the tuple of records it stands for: indexing, slicing (a tuple), ``len``,
    iteration, ``in``, ``==`` with a tuple of the same records, ``+`` (a tuple). Columns are
    read with :meth:`column`; :meth:`take` and :meth:`concat` reorder and join tables
    without making records.
    """

    __slots__ = ("_columns", "_lock", "_made", "_order", "_ordered", "_records")

    def __init__(self) -> None:  # use from_columns / from_records
        self._columns: dict[str, list[Any]] = {}  # COLUMNS, in source order
        self._order: list[int] | None = None  # row i is source row _order[i]
        self._ordered: dict[str, list[Any]] = {}  # columns with _order applied, when read
        self._records: tuple[TensorRecord, ...] | None = None
        self._made: dict[int, TensorRecord] = {}  # records handed out one by one
        self._lock = threading.Lock()

    @classmethod
    def from_columns(
        cls,
        names: list[str],
        dtypes: list[str],
        shapes: list[Any],
        nbytes: list[int],
        files: list[str],
        offsets: Sequence[int | None],
        mapped: Sequence[MappedFile | ReadValuesSource | None],
    ) -> RecordTable:
        """Tensors that are each one range of a file: ``offsets``/``nbytes`` into the file
        ``mapped`` (None: not loadable; a :class:`ReadValuesSource`: ``read_values_for(name)``, for a
        tensor made from several stored ones). Shapes may be lists (as parsed): records get tuples.
        The lists are the table's from now on; the caller must not change them."""
        table = cls()
        given: tuple[Any, ...] = (names, dtypes, shapes, nbytes, files, offsets, mapped)
        table._columns = dict(zip(COLUMNS, given, strict=True))
        return table

    @classmethod
    def from_records(cls, records: Iterable[TensorRecord]) -> RecordTable:
        if isinstance(records, RecordTable):
            return records
        table = cls()
        table._records = tuple(records)
        return table

    # -- columns ------------------------------------------------------------------------

    @property
    def columnar(self) -> bool:
        """Whether the table holds columns (made with :meth:`from_columns`, every one of
        :data:`COLUMNS` readable with :meth:`column`), not records."""
        return bool(self._columns)

    def column(self, field: str, keep: bool = True) -> Sequence[Any]:
        """One field of every record, in order (shapes as parsed: lists or tuples;
        ``read_values`` makes every record). Do not modify the result. ``keep=False``: a reordered column is
        not kept for the next call (a reader that reads a listing once to make its own)."""
        if not self._columns or field == "read_values":  # a table of records, or read_values
            return list(map(operator.attrgetter(field), self.records()))
        if field == "storage_key":
            return [None] * len(self)
        if field not in COLUMNS:
            return [_defaults()[field]] * len(self)  # KeyError: not a field
        return self._column(field, keep)

    def _column(self, field: str, keep: bool = True) -> list[Any]:
        if self._order is None:
            return self._columns[field]
        found = self._ordered.get(field)
        if found is None:
            found = list(map(self._columns[field].__getitem__, self._order))
            if keep:
                self._ordered[field] = found
        return found

    def nbytes_total(self) -> int:
        return sum(self.column("nbytes"))

    def element_total(self) -> int:
        """Elements of every record (aliases not merged: see ``view.unique_numel``)."""
        return sum(map(math.prod, self.column("shape")))

    def aliasing_possible(self) -> bool:
        """Whether some record names a shared storage (only then can two names alias)."""
        if self._columns:
            return False
        keys = self.column("storage_key")
        return keys.count(None) != len(keys)

    # -- records ------------------------------------------------------------------------

    def records(self) -> tuple[TensorRecord, ...]:
        """Every record (made once, then kept)."""
        if self._records is None:
            with self._lock:
                if self._records is None:
                    self._records = self._make_all()
        return self._records

    def _rows(self, shapes: list[tuple[int, ...]]) -> Iterator[tuple[Any, ...]]:
        name, dtype, nbytes, file, offset, mapped = map(
            self._column, ("name", "dtype", "nbytes", "file", "offset", "mapped")
        )
        read_values: list[Any]
        if not all(issubclass(t, MappedFile) for t in set(map(type, mapped))):
            read_values = list(map(_read_values, mapped, offset, nbytes, dtype, shapes, name))
        else:
            fixed = itertools.repeat(None), itertools.repeat(0), itertools.repeat("little")
            rows = zip(mapped, offset, nbytes, dtype, shapes, *fixed, strict=False)
            read_values = list(map(_NEW_READ_VALUES, rows))
        keys = itertools.repeat(None)
        return zip(name, dtype, shapes, nbytes, file, offset, keys, read_values, strict=False)

    def _make_all(self) -> tuple[TensorRecord, ...]:
        made = _records(self._rows(list(map(tuple, self._column("shape")))))
        for i, r in self._made.items():  # records handed out already stay the same objects
            made[i] = r
        return tuple(made)

    def _make(self, i: int) -> TensorRecord:
        r = self._made.get(i)
        if r is None:
            source = i if self._order is None else self._order[i]
            c = self._columns
            shape = tuple(c["shape"][source])
            row = [c[k][source] for k in COLUMNS]
            loader = _read_values(row[6], row[5], row[3], row[1], shape, row[0])
            (r,) = _records([(row[0], row[1], shape, row[3], row[4], row[5], None, loader)])
            with self._lock:
                r = self._made.setdefault(i, r)
        return r

    def __len__(self) -> int:
        if self._records is not None:
            return len(self._records)
        if self._order is not None:
            return len(self._order)
        return len(self._columns["name"])

    @overload
    def __getitem__(self, index: int) -> TensorRecord: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[TensorRecord, ...]: ...

    def __getitem__(self, index: int | slice) -> TensorRecord | tuple[TensorRecord, ...]:
        if self._records is not None:
            return self._records[index]
        if isinstance(index, slice):
            return tuple(map(self._make, range(*index.indices(len(self)))))
        n = len(self)
        i = operator.index(index)
        if not -n <= i < n:
            raise IndexError("record index out of range")
        return self._make(i % n)

    def __iter__(self) -> Iterator[TensorRecord]:
        return iter(self.records())

    def __reversed__(self) -> Iterator[TensorRecord]:
        return reversed(self.records())

    def __contains__(self, value: object) -> bool:
        return value in self.records()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordTable | tuple):
            return self.records() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.records())

    def __add__(self, other: Iterable[TensorRecord]) -> tuple[TensorRecord, ...]:
        if not isinstance(other, RecordTable | tuple | list):
            return NotImplemented
        return self.records() + tuple(other)

    def __radd__(self, other: Iterable[TensorRecord]) -> tuple[TensorRecord, ...]:
        if not isinstance(other, tuple | list):
            return NotImplemented
        return tuple(other) + self.records()

    def __repr__(self) -> str:
        return f"RecordTable({len(self)} records)"

    # -- reordering and joining -----------------------------------------------------------

    def take(self, indices: list[int]) -> RecordTable:
        """The records at ``indices``, in that order (columns reordered when read)."""
        if self._records is not None or self._made:
            return RecordTable.from_records(map(self.__getitem__, indices))
        table = RecordTable()
        table._columns = self._columns
        table._order = (
            indices if self._order is None else list(map(self._order.__getitem__, indices))
        )
        return table

    @staticmethod
    def concat(tables: Sequence[RecordTable]) -> RecordTable:
        """The records of ``tables`` one after the other."""
        if len(tables) == 1:
            return tables[0]
        if any(t._records is not None or t._made for t in tables):
            return RecordTable.from_records(itertools.chain.from_iterable(tables))
        table = RecordTable()
        table._columns = {
            k: list(itertools.chain.from_iterable(t._column(k) for t in tables)) for k in COLUMNS
        }
        return table


class ReadValuesSource(Protocol):
    """Where tensors that are not one range of one file load from (a quantized weight,
    dequantized from its parts): a column-born table asks it for a record's read_values."""

    def read_values_for(self, name: str) -> Callable[[], Any]: ...


def _read_values(
    mapped: MappedFile | ReadValuesSource | None,
    offset: int,
    nbytes: int,
    dtype: str,
    shape: tuple[int, ...],
    name: str,
) -> MappedTensor | Callable[[], Any] | None:
    if mapped is None:
        return None
    if isinstance(mapped, MappedFile):
        return MappedTensor(mapped, offset, nbytes, dtype, shape)
    return mapped.read_values_for(name)


def record_column(records: Iterable[TensorRecord], field: str) -> Sequence[Any]:
    """``[getattr(r, field) for r in records]``, from the columns when ``records`` is a table."""
    if isinstance(records, RecordTable):
        return records.column(field)
    return list(map(operator.attrgetter(field), records))
