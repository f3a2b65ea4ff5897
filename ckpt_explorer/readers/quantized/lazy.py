"""The quantized weights of a view, made when a consumer asks for them.

Listing a DeepSeek-V3 export groups 45,000 FP8 weights; ``inspect`` shows a count and the
first rows, so neither a :class:`~.parts.QuantWeight` nor its ``describe()`` dict is made at
listing. :class:`Weights` is the view's name -> weight mapping (``quant_weights``, the
loaders, the diff's budget), :class:`Described` the ``weights`` entry of the view's
quantization value: a dict whose values are made on first read.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, Mapping, ValuesView
from dataclasses import replace
from typing import Any

from .parts import Grouped, QuantWeight


class Weights(Mapping[str, QuantWeight]):
    """name -> :class:`QuantWeight` of a :class:`~.parts.Grouped`, each made once, when first
    asked for, with ``extra`` params added (a name found twice: its last weight)."""

    __slots__ = ("_extra", "_grouped", "_index", "_made")

    def __init__(self, grouped: Grouped, extra: dict[str, Any] | None = None) -> None:
        self._grouped = grouped
        self._extra = extra or {}
        self._index: dict[str, int] | None = None
        self._made: dict[int, QuantWeight] = {}

    def _positions(self) -> dict[str, int]:
        if self._index is None:
            names = self._grouped.names
            self._index = dict(zip(names, range(len(names)), strict=True))
        return self._index

    def __getitem__(self, name: str) -> QuantWeight:
        i = self._positions()[name]
        w = self._made.get(i)
        if w is None:
            w = self._grouped.weight(i)
            if self._extra:
                w = replace(w, params={**w.params, **self._extra})
            w = self._made.setdefault(i, w)
        return w

    def __iter__(self) -> Iterator[str]:
        return iter(self._positions())

    def __len__(self) -> int:
        return len(self._positions())

    def __contains__(self, name: object) -> bool:
        return name in self._positions()


_PENDING: Any = object()  # a value not made yet


class Described(dict[str, Any]):
    """name -> ``weight.describe()``: a dict (it is one to every consumer and to JSON) that
    holds every name from the start and makes each value when it is first read."""

    def __init__(self, names: Iterable[str], weights: Mapping[str, QuantWeight]) -> None:
        super().__init__(dict.fromkeys(names, _PENDING))  # the names of ``weights``
        self._weights = weights

    def _value(self, key: str, value: Any) -> Any:
        if value is _PENDING:
            value = self._weights[key].describe()
            dict.__setitem__(self, key, value)
        return value

    def __getitem__(self, key: str) -> Any:
        return self._value(key, dict.__getitem__(self, key))

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        value = dict.get(self, key, _PENDING)
        if value is _PENDING and key not in self:
            return default
        return self._value(key, value)

    def __iter__(self) -> Iterator[str]:  # also keeps dict(x) and {**x} off the raw values
        return dict.__iter__(self)

    def items(self) -> ItemsView[str, Any]:  # type: ignore[override]
        return ItemsView(self)

    def values(self) -> ValuesView[Any]:  # type: ignore[override]
        return ValuesView(self)

    def copy(self) -> dict[str, Any]:
        return {k: self[k] for k in self}

    def setdefault(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else dict.setdefault(self, key, default)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            value = self[key]
            del self[key]
            return value
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[str, Any]:
        key = next(reversed(self))
        return key, self.pop(key)

    def __eq__(self, other: object) -> bool:
        return self.copy() == (other.copy() if isinstance(other, Described) else other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __or__(self, other: Any) -> dict[str, Any]:  # type: ignore[override]
        return self.copy() | other

    def __ror__(self, other: Any) -> dict[str, Any]:  # type: ignore[override]
        return dict(other) | self.copy()

    def __repr__(self) -> str:
        return repr(self.copy())

    def __reduce__(self) -> tuple[Any, ...]:  # pickles and copies as the plain dict it shows
        return (dict, (self.copy(),))
