"""Parse and check a safetensors header from bytes, treating it as hostile input."""

from __future__ import annotations

import functools
import itertools
import json
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import CorruptCheckpointError, TruncatedFileError
from .location import PathLike, as_location
from .safetensors_dtypes import DTYPES, HeaderEntry
from .safetensors_seen import checked_header

if TYPE_CHECKING:
    from .safetensors_fast import HeaderColumns

MAX_HEADER_BYTES = 100_000_000  # the reference implementation's cap


@dataclass(frozen=True)
class SafetensorsHeader:
    """A checked header: its entries (as columns, in header order), metadata, layout facts."""

    header_len: int
    columns: HeaderColumns
    metadata: dict[str, str]
    file_size: int
    text_start: str = ""  # the header's first characters, as written (tells writers apart)

    @functools.cached_property
    def entries(self) -> tuple[HeaderEntry, ...]:
        """One :class:`HeaderEntry` per tensor, in header order (made on first use)."""
        return tuple(self.columns.entries())

    @property
    def data_start(self) -> int:
        return 8 + self.header_len

    @property
    def data_end(self) -> int:
        return self.data_start + max(self.columns.ends, default=0)

    def in_canonical_order(self) -> bool:
        """True if the data follows the reference writer's order.

        ``safetensors`` lays tensors out by dtype (wider first), then by name; ColossalAI's
        async writer keeps the state_dict's insertion order.
        """
        ordered = sorted(self.entries, key=lambda e: e.begin)
        for a, b in itertools.pairwise(ordered):
            bits_a, bits_b = DTYPES[a.dtype][1], DTYPES[b.dtype][1]
            if bits_a < bits_b or (a.dtype == b.dtype and a.name > b.name):
                return False
        return True

    def packed_without_alignment(self) -> bool:
        """True if some tensor starts at an offset not aligned to its element size."""
        for e in self.entries:
            bits = DTYPES[e.dtype][1]
            if bits >= 8 and e.begin % (bits // 8):
                return True
        return False


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def read_header(path: PathLike) -> SafetensorsHeader:
    """Read and validate the header of a safetensors file (no tensor bytes are read).

    Raises:
        CorruptCheckpointError: malformed header (bad length, JSON, dtype, shape, offsets).
        TruncatedFileError: the file is shorter than the header declares.
    """
    path = as_location(path)
    size = path.size()
    head = path.read_range(0, 8)
    if len(head) < 8:
        raise TruncatedFileError(
            path,
            "an 8-byte safetensors header length",
            f"a file of {size} bytes",
            "The file is empty or truncated.",
        )
    (n,) = struct.unpack("<Q", head)
    if n > MAX_HEADER_BYTES:
        raise CorruptCheckpointError(
            path,
            f"a header length under {MAX_HEADER_BYTES} bytes",
            f"{n}",
            "This is not a safetensors file, or it is corrupt.",
        )
    if 8 + n > size:
        raise TruncatedFileError(
            path,
            f"a header of {n} bytes",
            f"only {size - 8} bytes after the length",
            "The file is truncated; copy it again from its source.",
        )
    raw = path.read_range(8, 8 + n)
    return parse_header(path, raw, size)


def parse_header(path: object, raw: bytes, file_size: int) -> SafetensorsHeader:
    """Validate header bytes ``raw`` (without the length prefix) of a file of ``file_size``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(path, "a UTF-8 JSON header", f"invalid UTF-8 ({e})") from e
    if not text.startswith("{"):
        raise CorruptCheckpointError(path, "a JSON object header", f"text starting {text[:16]!r}")
    quick = checked_header(raw, text)  # the column-wise checks, once per header's bytes
    if quick is not None:
        columns, metadata = quick
        return _header(path, raw, text, columns, metadata, file_size)
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as e:
        raise CorruptCheckpointError(path, "a valid JSON header", f"{e}") from e
    if not isinstance(doc, dict):
        raise CorruptCheckpointError(path, "a JSON object header", type(doc).__name__)
    metadata = doc.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise CorruptCheckpointError(path, "__metadata__ as a str->str map", repr(metadata)[:80])
    entries = [_entry(path, name, info) for name, info in doc.items()]
    _check_coverage(path, entries)
    return _header(path, raw, text, _as_columns(entries), metadata, file_size)


def _as_columns(entries: list[HeaderEntry]) -> HeaderColumns:
    from .safetensors_fast import HeaderColumns

    if not entries:
        return HeaderColumns([], [], [], [], [])
    names, dtypes, shapes, begins, ends = map(list, zip(*entries, strict=True))
    return HeaderColumns(names, dtypes, [list(s) for s in shapes], begins, ends)


def _header(
    path: object,
    raw: bytes,
    text: str,
    columns: HeaderColumns,
    metadata: dict[str, str],
    file_size: int,
) -> SafetensorsHeader:
    header = SafetensorsHeader(len(raw), columns, dict(metadata), file_size, text[:48])
    if header.data_end > file_size:
        raise TruncatedFileError(
            path,
            f"{header.data_end} bytes as the header declares",
            f"{file_size} bytes",
            "The file is truncated, or an asynchronous save is still writing it.",
        )
    return header


def checked_columns(raw: bytes, text: str) -> tuple[HeaderColumns, dict[str, str]] | None:
    """The columns and metadata of a well-formed header, checked column by column at C
    speed; None when anything is unusual (the caller then checks entry by entry, to say what).
    See :mod:`.safetensors_fast`."""
    from .safetensors_fast import checked_columns as check

    return check(raw, text, DTYPES)


def checked_entries(raw: bytes, text: str) -> tuple[list[HeaderEntry], dict[str, str]] | None:
    """:func:`checked_columns` as a list of :class:`HeaderEntry`."""
    from .safetensors_fast import checked_entries as check

    return check(raw, text, DTYPES)


def _entry(path: object, name: str, info: Any) -> HeaderEntry:
    if not isinstance(info, dict):
        raise CorruptCheckpointError(path, f"an object for tensor {name!r}", repr(info)[:80])
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPES:
        raise CorruptCheckpointError(path, f"a known dtype for {name!r}", repr(dtype))
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise CorruptCheckpointError(path, f"a list of sizes for {name!r}", repr(shape)[:80])
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise CorruptCheckpointError(
            path, f"data_offsets [begin, end] for {name!r}", repr(offsets)[:80]
        )
    numel = 1
    for d in shape:
        numel *= d
    bits = numel * DTYPES[dtype][1]
    if bits % 8 or offsets[1] - offsets[0] != bits // 8:
        raise CorruptCheckpointError(
            path,
            f"{name!r} ({dtype} {shape}) to take {bits / 8:g} bytes",
            f"{offsets[1] - offsets[0]} bytes",
        )
    return HeaderEntry(name, dtype, tuple(shape), offsets[0], offsets[1])


def _check_coverage(path: object, entries: list[HeaderEntry]) -> None:
    position = 0
    for e in sorted(entries, key=lambda e: (e.begin, e.end)):
        if e.begin < position:
            raise CorruptCheckpointError(
                path, f"non-overlapping tensors (at byte {e.begin})", f"{e.name!r} overlaps"
            )
        if e.begin > position:
            raise CorruptCheckpointError(
                path,
                "tensors covering the data buffer without holes",
                f"a gap of {e.begin - position} bytes before {e.name!r}",
            )
        position = e.end
