"""Work limits for unpickling: a few bytes of pickle must not buy gigabytes of memory or hours.

A pickle can share one object many times (memo references). Anything that then copies, hashes,
prints or walks the object pays for every share: ``[x, x]`` nested 40 deep is 400 bytes of
pickle and 2^40 elements of walk. :class:`WorkBudget` bounds that work by the pickle's size; the
checks here charge it before the costly step runs, never after.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# A legitimate pickle spends at least one byte per element it describes, so its elements,
# shared references included, stay well under this many per byte.
UNITS_PER_BYTE = 4
MIN_UNITS = 1_000_000

LEAF_TYPES = (str, int, float, bool, bytes, type(None), complex)  # nothing to walk under


# The only text codecs a pickle may name (torch/pickle protocol 2 writes bytes as latin1 text);
# any other name would make Python look up, and import, a codec module.
TEXT_ENCODINGS = {"latin1", "utf8", "ascii"}


def normalized_encoding(name: Any) -> str:
    return name.lower().replace("-", "").replace("_", "") if isinstance(name, str) else "?"


class WorkBudget:
    """Counts elements copied, hashed or walked for one pickle and refuses past the limit."""

    def __init__(self, pickle_bytes: int) -> None:
        self.limit = MIN_UNITS + UNITS_PER_BYTE * max(0, pickle_bytes)
        self.used = 0

    def charge(self, units: int, what: str) -> None:
        self.used += units
        if self.used > self.limit:
            raise pickle.UnpicklingError(
                f"{what} would copy, hash or walk more than {self.limit:,} elements, far more "
                "than a pickle of this size holds (shared or cyclic references, or a huge "
                "count); not allowed"
            )


def charge_hash(budget: WorkBudget, key: Any) -> None:
    """Charge what hashing ``key`` costs: nested tuples and frozensets are re-hashed in full."""
    if type(key) is str or type(key) is int:
        return
    count = 0
    stack = [key]
    while stack:
        item = stack.pop()
        count += 1
        if isinstance(item, tuple | frozenset):
            count += len(item)
            budget.charge(count, "a dictionary key or set element")
            count = 0
            stack.extend(item)
    budget.charge(count, "a dictionary key or set element")


def charge_walk(budget: WorkBudget, root: Any, children: Callable[[Any], Iterable[Any]]) -> None:
    """Charge one full walk of ``root`` as readers will do it: every shared object each time.

    A cycle never ends its walk, so it runs into the limit and is refused.
    """
    stack = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, LEAF_TYPES):
            continue
        kids = list(children(item))
        if kids:
            budget.charge(len(kids), "the unpickled object")
            stack.extend(kids)


def _size_of(arg: Any) -> int:
    if isinstance(arg, bool):
        return 1
    if isinstance(arg, int):  # bytes(n) / bytearray(n): n zero bytes
        return max(1, arg // 8)
    try:
        return max(1, len(arg))
    except TypeError:
        return 1
    except OverflowError as e:  # range(2**70)
        raise pickle.UnpicklingError(f"a sequence too long to copy ({e}); not allowed") from e


def _hashed_by(arg: Any) -> Iterable[Any]:
    """What a hashing constructor may hash when given ``arg``: a mapping's keys, or each element
    whole (``set``), and a list element's items (``dict([[key, value]])`` hashes ``key``).
    Charging a whole ``(key, value)`` tuple or every item of a list pair over-counts, never under."""
    if isinstance(arg, Mapping):
        return list(arg.keys())
    if not isinstance(arg, list | tuple | set | frozenset):
        return []
    out: list[Any] = []
    for element in arg:
        if isinstance(element, list):
            out.extend(element)
        else:
            out.append(element)
    return out


class GuardedConstructor:
    """A copying constructor (``list``, ``dict``, ``torch.Size``...) that pays before it copies.

    ``str`` of anything but a scalar is refused: printing a shared structure is the walk the
    budget exists to stop.
    """

    def __init__(self, ctor: Callable[..., Any], budget: WorkBudget, hashes: bool) -> None:
        self.ctor = ctor
        self.budget = budget
        self.hashes = hashes
        self.name = f"{getattr(ctor, '__name__', 'constructor')}()"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not args:
            return self.ctor(**kwargs)
        if self.ctor is str and not isinstance(args[0], LEAF_TYPES):
            raise pickle.UnpicklingError(f"str() of a {type(args[0]).__name__} is not allowed")
        encoding = args[1] if len(args) > 1 else kwargs.get("encoding")
        if encoding is not None and normalized_encoding(encoding) not in TEXT_ENCODINGS:
            raise pickle.UnpicklingError(
                f"{self.name} with encoding {encoding!r:.40} is not allowed"
            )
        self.budget.charge(_size_of(args[0]), self.name)
        if self.hashes:
            for key in _hashed_by(args[0]):
                charge_hash(self.budget, key)
        return self.ctor(*args, **kwargs)

    def __repr__(self) -> str:
        return repr(self.ctor)
