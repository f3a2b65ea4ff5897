"""What every quantized-safetensors scheme shares: one logical weight made of stored parts.

A quantized export stores each quantized weight as several tensors (the packed values, their
scales, zero points, a lookup table, a JSON quant state ...). A scheme module claims the parts
of each weight it recognises and returns one :class:`QuantWeight` per weight: its HF name, its
logical shape, the scheme's words (bits, block or group size) and a function that dequantizes
the parts to float exactly as the scheme's own library does. Tensors no scheme claims stay as
they are (norms, embeddings, ignored modules kept in float).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, overload

if TYPE_CHECKING:
    import torch

MAX_JSON_BYTES = 1 << 20
Load = Callable[[str], "torch.Tensor"]  # a stored part's values by its name


@dataclass(frozen=True)
class QuantWeight:
    """One logical weight of a quantized export.

    Attributes:
        name: the HF name of the weight it encodes (``...q_proj.weight``).
        shape: its logical shape.
        scheme: the scheme (``compressed-tensors``, ``fp8``, ``bitsandbytes`` ...).
        storage_type: the storage type in short (``int4``, ``fp8_e4m3``, ``nf4`` ...): the key of
            its rule in :data:`~ckpt_explorer.diff.quant_budget.RULES`.
        bits: bits per stored value.
        block: how values share a scale, in words (``group 32``, ``block 128x128``,
            ``channel``, ``tensor``).
        parts: the stored tensors, role -> stored name.
        params: what dequantizing and the budget need (group size, symmetric, block shape ...).
        dequantize: the parts (role -> tensor) -> the float values.
    """

    name: str
    shape: tuple[int, ...]
    scheme: str
    storage_type: str
    bits: int
    block: str
    parts: dict[str, str]
    params: dict[str, Any] = field(default_factory=dict)
    dequantize: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None

    @property
    def label(self) -> str:
        """The record's dtype: storage type and sharing, e.g. ``int4/group32``."""
        return f"{self.storage_type}/{self.block.replace(' ', '')}"

    # a JSON field list: alike in shape with other records' to_json only
    def describe(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in self.params.items() if isinstance(v, int | float | str | bool)},
            "scheme": self.scheme,
            "type": self.storage_type,
            "bits": self.bits,
            "block": self.block,
            "parts": dict(self.parts),
        }

    def values(self, load: Load) -> torch.Tensor:
        assert self.dequantize is not None
        return self.dequantize({role: load(name) for role, name in self.parts.items()})


class Stored(Protocol):
    """What a scheme reads of a stored tensor (a record has it, and so has :class:`Part`)."""

    @property
    def name(self) -> str: ...

    @property
    def dtype(self) -> str: ...

    @property
    def shape(self) -> Sequence[int]: ...


class Part(NamedTuple):
    name: str  # the listing's own string (a weight's name shares it)
    dtype: str
    shape: Sequence[int]


class StoredParts(Mapping[str, Part]):
    """name -> (name, dtype, shape) of the stored tensors, read from the listing's columns (no
    record is made); a name stored twice is its last copy, as in a dict of the records.

    Attributes:
        names, dtypes, shapes: the columns, in the listing's order (shapes as parsed).
        positions: name -> its row (its last copy).
    """

    __slots__ = ("dtypes", "names", "positions", "shapes")

    def __init__(self, names: Sequence[str], dtypes: Sequence[str], shapes: Sequence[Any]):
        self.positions = dict(zip(names, range(len(names)), strict=True))
        self.names = names
        self.dtypes = dtypes
        self.shapes = shapes

    @classmethod
    def of(cls, stored: Mapping[str, Stored]) -> StoredParts:
        values = list(stored.values())
        return cls(list(stored), [v.dtype for v in values], [v.shape for v in values])

    def __getitem__(self, name: str) -> Part:
        i = self.positions[name]
        return Part(self.names[i], self.dtypes[i], self.shapes[i])

    def get(self, name: str, default: Any = None) -> Any:
        i = self.positions.get(name)
        return default if i is None else Part(self.names[i], self.dtypes[i], self.shapes[i])

    def __contains__(self, name: object) -> bool:
        return name in self.positions

    def __iter__(self) -> Iterator[str]:
        return iter(self.positions)

    def __len__(self) -> int:
        return len(self.positions)

    def shape(self, name: str) -> tuple[int, ...] | None:
        i = self.positions.get(name)
        return None if i is None else tuple(self.shapes[i])


class PartColumns(Sequence[tuple[str, ...]]):
    """Each weight's parts when every weight has the same roles, kept as one column a role
    (no tuple a weight until one is asked for)."""

    __slots__ = ("columns",)

    def __init__(self, *columns: list[str]) -> None:
        self.columns = columns

    @overload
    def __getitem__(self, i: int) -> tuple[str, ...]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[str, ...]]: ...

    def __getitem__(self, i: int | slice) -> tuple[str, ...] | list[tuple[str, ...]]:
        if isinstance(i, slice):
            return list(zip(*(c[i] for c in self.columns), strict=True))
        return tuple(c[i] for c in self.columns)

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        return zip(*self.columns, strict=True)

    def __len__(self) -> int:
        return len(self.columns[0])


class Grouped:
    """The weights a scheme found, as columns; each :class:`QuantWeight` is made when asked
    for (a DeepSeek-V3 export has 45,000: the listing needs only their names, shapes, labels
    and parts).

    Attributes:
        names: each weight's name.
        shapes: its logical shape.
        parts: the stored names of its parts, in the order of its family's ``roles``.
        family: for each weight, the index in ``families`` of what it shares with others
            (scheme, kind, bits, block, params, dequantize: a weight of that family).
        families: one weight of each family.
        roles: each family's part roles, in the order of ``parts``.
    """

    __slots__ = ("families", "family", "names", "parts", "roles", "shapes")

    def __init__(
        self,
        names: list[str],
        shapes: list[tuple[int, ...]],
        parts: Sequence[tuple[str, ...]],
        family: list[int],
        families: list[QuantWeight],
    ) -> None:
        self.names = names
        self.shapes = shapes
        self.parts = parts
        self.family = family
        self.families = families
        self.roles = [tuple(f.parts) for f in families]

    @classmethod
    def of(cls, weights: Sequence[QuantWeight]) -> Grouped:
        """Weights made one by one (each its own family)."""
        return cls(
            [w.name for w in weights],
            [w.shape for w in weights],
            [tuple(w.parts.values()) for w in weights],
            list(range(len(weights))),
            list(weights),
        )

    def __len__(self) -> int:
        return len(self.names)

    def label(self, i: int) -> str:
        return self.families[self.family[i]].label

    def weight(self, i: int) -> QuantWeight:
        """The ``i``-th weight (made anew unless it is its family's own)."""
        f = self.families[self.family[i]]
        name, shape, parts = self.names[i], self.shapes[i], self.parts[i]
        if f.name == name and f.shape == shape and tuple(f.parts.values()) == parts:
            return f
        return QuantWeight(
            name,
            shape,
            f.scheme,
            f.storage_type,
            f.bits,
            f.block,
            dict(zip(self.roles[self.family[i]], parts, strict=True)),
            f.params,
            f.dequantize,
        )


Grouper = Callable[[Mapping[str, Stored], dict[str, Any], Load], "list[QuantWeight] | Grouped"]


def module_of(name: str, suffix: str) -> str | None:
    """``a.b.weight_packed`` with suffix ``.weight_packed`` -> ``a.b``; None if no match."""
    return name[: -len(suffix)] if name.endswith(suffix) else None


def json_part(t: torch.Tensor) -> dict[str, Any]:
    """A JSON document stored as a uint8 tensor (bitsandbytes' quant state)."""
    import json

    if t.numel() > MAX_JSON_BYTES:
        raise ValueError(f"a {t.numel()}-byte quant state (at most {MAX_JSON_BYTES} read)")
    doc = json.loads(bytes(t.reshape(-1).tolist()).decode("utf-8"))
    if not isinstance(doc, dict):
        raise ValueError("the quant state is not a JSON object")
    return doc
