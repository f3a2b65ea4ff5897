"""Parse a GGUF header (llama.cpp's file format) from bytes, treating it as hostile input.

A GGUF file is ``GGUF``, a version (1-3), the tensor count and the key/value count (32-bit
counts in version 1, 64-bit since), the key/value pairs (typed scalars, strings, arrays), one
info per tensor (name, dimensions innermost first, ggml type, offset into the data section),
then the data section, aligned to ``general.alignment`` (32 by default). A big-endian file
(llama.cpp on s390x) writes every number big-endian: its version read little-endian is not
1-3 but is read big-endian.

:func:`parse` reads through ``fetch(start, end)`` (any byte source: a mapped buffer, a
store's range reads), in growing blocks, so a listing moves only the header. Large arrays
(a tokenizer's 150,000 tokens) are walked but only their first items are kept
(:class:`ArraySummary`). The security gate places GGUF files with the same parser.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_COUNT = 1 << 24  # tensors, keys, array items, string bytes: llama.cpp's own files stay under
MAX_DIMS = 8  # GGML_MAX_DIMS is 4; a few writers allow more
KEEP_ITEMS = 16  # array items kept in a listing (the count is always kept)
FIRST_BLOCK = 1 << 16
CHUNK = 4096  # strings stepped over between two checks
# llama.cpp's split sets (gguf-split): <prefix>-00001-of-00003.gguf ... found by these names
SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def split_names(name: str) -> list[str] | None:
    """Every file name of the split set ``name`` belongs to, in order (None when ``name`` is
    not named as a split)."""
    m = SPLIT_NAME.match(name)
    if m is None:
        return None
    count = int(m["count"])
    return [f"{m['prefix']}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


# value type -> struct code of a scalar
SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
STRING, ARRAY = 8, 9
VALUE_TYPES = {
    0: "uint8",
    1: "int8",
    2: "uint16",
    3: "int16",
    4: "uint32",
    5: "int32",
    6: "float32",
    7: "bool",
    8: "string",
    9: "array",
    10: "uint64",
    11: "int64",
    12: "float64",
}

# ggml type id -> (name, elements per block, bytes per block): ggml's type traits
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
}

Fetch = Callable[[int, int], bytes]


class GGUFError(ValueError):
    """The bytes are not a well-formed GGUF header (the message says where and why)."""


@dataclass(frozen=True)
class ArraySummary:
    """An array value: its item type, its length and its first items (all of a short one)."""

    item_type: str
    count: int
    head: tuple[Any, ...]

    @property
    def complete(self) -> bool:
        return len(self.head) == self.count

    def __str__(self) -> str:
        shown = ", ".join(repr(x) for x in self.head[:4])
        more = f", ... ({self.count} items)" if self.count > 4 else ""
        return f"[{shown}{more}]"


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the header: ``dims`` as written (innermost first), ``offset`` relative to
    the data section."""

    name: str
    dims: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def type_name(self) -> str:
        known = GGML_TYPES.get(self.ggml_type)
        return known[0] if known else f"type {self.ggml_type}"

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape as numpy / torch / HF write it (outermost first)."""
        return tuple(reversed(self.dims))

    @property
    def numel(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes in the data section: whole blocks of the innermost dimension, per row."""
        _, block, size = GGML_TYPES[self.ggml_type]
        inner = self.dims[0] if self.dims else 1
        return (inner // block) * size * (self.numel // inner if inner else 0)


@dataclass(frozen=True)
class GGUFHeader:
    """A checked header. ``metadata`` keeps values in file order (arrays summarised);
    ``data_start`` is where the data section begins; tensors are checked to lie inside it."""

    version: int
    byteorder: str  # "little" or "big"
    metadata: dict[str, Any]
    value_types: dict[str, str]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    header_end: int
    data_start: int
    file_size: int = field(default=0)

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else ""

    def arch_key(self, suffix: str) -> Any:
        """``<architecture>.<suffix>`` (``llama.context_length``), None when absent."""
        return self.metadata.get(f"{self.architecture}.{suffix}")


class _Cursor:
    """Sequential reads over ``fetch``, in blocks that double (a header of 10 MB of tokens is
    a few range reads, not a million)."""

    def __init__(self, fetch: Fetch, size: int, endian: str) -> None:
        self.fetch, self.size, self.endian = fetch, size, endian
        self.buf = b""
        self.base = 0  # file offset of buf[0]
        self.at = 0  # file offset of the next byte
        self.block = FIRST_BLOCK

    def ensure(self, n: int) -> int:
        """Make ``n`` bytes from the current position available in ``buf``; their index."""
        if n < 0 or self.at + n > self.size:
            raise GGUFError(f"a read of {n} bytes at byte {self.at} runs past the end")
        end = self.at + n
        if end > self.base + len(self.buf):  # reads are sequential: at <= the end of buf
            have = self.base + len(self.buf)
            want = min(self.size, max(end, have + self.block))
            self.buf = self.buf[self.at - self.base :] + self.fetch(have, want)
            self.base = self.at
            self.block = min(self.block * 2, 1 << 26)
            if self.base + len(self.buf) < end:
                raise GGUFError(f"the file ends before byte {end}")
        return self.at - self.base

    def take(self, n: int) -> bytes:
        i = self.ensure(n)
        self.at += n
        return self.buf[i : i + n]

    def strings(self, n: int, wide: bool, keep: int) -> list[str]:
        """Walk ``n`` strings (an array's items), decoding only the first ``keep``: the rest
        are stepped over by their lengths alone (a tokenizer holds 150,000 of them; none is
        decoded or copied), in chunks of :data:`CHUNK` items checked once each."""
        kept = [self.string(wide) for _ in range(min(n, keep))]
        width = 8 if wide else 4
        length = struct.Struct(self.endian + ("Q" if wide else "I")).unpack_from
        left = n - len(kept)
        while left:
            k = min(left, CHUNK)
            buf, start = self.buf, self.at - self.base
            i, ran_off = start, False
            try:
                for _ in range(k):
                    i += length(buf, i)[0] + width
            except struct.error:  # a length past the buffer's end
                ran_off = True
            span, have = i - start, len(buf) - start
            if not ran_off and span <= min(have, MAX_COUNT):  # k items inside the buffer
                self.at += span
                left -= k
                continue
            if span <= MAX_COUNT and self.at + have < self.size:  # runs on past the buffer
                self.ensure(have + 1)  # the next block
                continue
            for _ in range(k):  # a string too long, or the file ends: item by item, checked
                self.take(self.count(wide, "a string length"))
            left -= k
        return kept

    def unpack(self, code: str) -> Any:
        fmt = self.endian + code
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self, wide: bool, what: str) -> int:
        n = int(self.unpack("Q" if wide else "I"))
        if n > MAX_COUNT:
            raise GGUFError(f"{what} of {n} (more than {MAX_COUNT})")
        return n

    def string(self, wide: bool) -> str:
        raw = self.take(self.count(wide, "a string length"))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFError(f"a string that is not UTF-8 at byte {self.at - len(raw)}") from e


def _value(c: _Cursor, kind: int, wide: bool, depth: int = 0) -> Any:
    if kind in SCALARS:
        return c.unpack(SCALARS[kind])
    if kind == STRING:
        return c.string(wide)
    if kind == ARRAY and depth < 4:
        item = int(c.unpack("I"))
        n = c.count(wide, "an array length")
        if item in SCALARS:
            code = SCALARS[item]
            i = c.ensure(n * struct.calcsize(code))  # buffered, not copied
            c.at += n * struct.calcsize(code)
            head = struct.unpack_from(f"{c.endian}{min(n, KEEP_ITEMS)}{code}", c.buf, i)
            return ArraySummary(VALUE_TYPES[item], n, head)
        if item == STRING:
            return ArraySummary("string", n, tuple(c.strings(n, wide, KEEP_ITEMS)))
        if item != ARRAY:
            raise GGUFError(f"an array of value type {item}")
        kept = [_value(c, item, wide, depth + 1) for _ in range(min(n, KEEP_ITEMS))]
        for _ in range(n - len(kept)):
            _value(c, item, wide, depth + 1)
        return ArraySummary(VALUE_TYPES[item], n, tuple(kept))
    raise GGUFError(f"value type {kind}" + (" nested too deeply" if kind == ARRAY else ""))


def byteorder_of(head: bytes) -> tuple[str, int] | None:
    """(``"little"``/``"big"``, version) from a file's first 8 bytes; None if not GGUF 1-3."""
    if len(head) < 8 or head[:4] != MAGIC:
        return None
    for order, code in (("little", "<I"), ("big", ">I")):
        (version,) = struct.unpack(code, head[4:8])
        if version in (1, 2, 3):
            return order, version
    return None


def parse(fetch: Fetch, size: int) -> GGUFHeader:
    """The header of the GGUF file of ``size`` bytes that ``fetch(start, end)`` reads.

    Raises:
        GGUFError: not GGUF 1-3, a count or length out of bounds, an unknown value or ggml
            type, a tensor outside the file, two tensors with one name.
    """
    found = byteorder_of(fetch(0, min(size, 8)))
    if found is None:
        raise GGUFError("not the GGUF magic followed by version 1, 2 or 3")
    order, version = found
    c = _Cursor(fetch, size, "<" if order == "little" else ">")
    c.take(8)
    wide = version > 1
    n_tensors = c.count(wide, "a tensor count")
    n_kv = c.count(wide, "a key/value count")
    metadata: dict[str, Any] = {}
    types: dict[str, str] = {}
    for _ in range(n_kv):
        key = c.string(wide)
        kind = int(c.unpack("I"))
        if key in metadata:
            raise GGUFError(f"the key {key!r} twice")
        metadata[key] = _value(c, kind, wide)
        types[key] = VALUE_TYPES.get(kind, str(kind))
    infos = []
    for _ in range(n_tensors):
        name = c.string(wide)
        n_dims = int(c.unpack("I"))
        if n_dims > MAX_DIMS:
            raise GGUFError(f"{n_dims} dimensions for {name!r}")
        dims = tuple(int(c.unpack("Q" if wide else "I")) for _ in range(n_dims))
        ggml_type = int(c.unpack("I"))
        offset = int(c.unpack("Q"))
        infos.append(TensorInfo(name, dims, ggml_type, offset))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(f"general.alignment {alignment!r} (a power of two is expected)")
    header_end = c.at
    data_start = -(-header_end // alignment) * alignment
    header = GGUFHeader(
        version, order, metadata, types, tuple(infos), alignment, header_end, data_start, size
    )
    _check_tensors(header)
    return header


def _check_tensors(h: GGUFHeader) -> None:
    seen: set[str] = set()
    for t in h.tensors:
        if t.name in seen:
            raise GGUFError(f"two tensors named {t.name!r}")
        seen.add(t.name)
        known = GGML_TYPES.get(t.ggml_type)
        if known is None:
            raise GGUFError(f"ggml type {t.ggml_type} of {t.name!r}")
        if t.dims and t.dims[0] % known[1]:
            raise GGUFError(
                f"{t.name!r}: {t.dims[0]} elements per row, not whole {known[0]} blocks "
                f"of {known[1]}"
            )
        if t.offset % h.alignment:
            raise GGUFError(f"{t.name!r} at data offset {t.offset}, not {h.alignment}-aligned")
        end = h.data_start + t.offset + t.nbytes
        if end > h.file_size:
            raise GGUFError(
                f"{t.name!r} ends at byte {end}, past the end of the file ({h.file_size} bytes)"
            )


def parse_buffer(buf: Any, size: int) -> GGUFHeader:
    """:func:`parse` over an in-memory buffer (bytes, memoryview, mmap)."""
    return parse(lambda start, end: bytes(buf[start:end]), size)
