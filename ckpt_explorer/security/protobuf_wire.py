"""Protobuf's wire format, walked field by field (sentencepiece models, ONNX models): nothing
is decoded beyond the field keys and lengths."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class WireError(ValueError):
    """The bytes are not a sequence of well-formed protobuf fields."""


def varint(buf: Any, at: int, end: int) -> tuple[int, int]:
    """The varint at ``buf[at]`` and the offset after it (at most 10 bytes, inside ``end``)."""
    value = shift = 0
    while True:
        if at >= end or shift > 63:
            raise WireError("a varint runs past its message")
        b = buf[at]
        at += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, at


def fields(buf: Any, at: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field, wire type, start, end) of each field of the message ``buf[at:end]``, one at a
    time (a caller stops at the first it refuses); groups (wire types 3, 4) are refused, as
    neither format uses them."""
    while at < end:
        key, at = varint(buf, at, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        start = at
        if wire == 0:
            _, at = varint(buf, at, end)
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        elif wire == 2:
            n, start = varint(buf, at, end)
            at = start + n
        else:
            raise WireError(f"wire type {wire}")
        if at > end:
            raise WireError("a field runs past its message")
        yield number, wire, start, at
