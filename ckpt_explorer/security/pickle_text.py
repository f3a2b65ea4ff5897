"""The text arguments of protocol-0 opcodes, read as CPython's two unpicklers read them.

``pickle.load`` is the C unpickler (``Modules/_pickle.c``); joblib, ``pickle._Unpickler``
subclasses and others use the pure-Python one (``Lib/pickle.py``). They parse the same line
differently in places that ``pickletools`` does not model at all: the C ``INT`` opcode runs
``strtol(s, &end, 0)`` on a NUL-terminated copy (``I052`` is octal 42, ``I1\\x00junk`` is 1),
then ``int(s, 0)`` (``I0x2a``, ``I0o52``, ``I4_2`` are 42); the Python one runs
``int(line, 0)`` on the whole line. Each reader here returns the C value and whether the
Python unpickler reads the same line the same way (``agree``); an error is raised only where
the C unpickler raises too.
"""

from __future__ import annotations

import codecs
import contextlib
import re
import warnings
from dataclasses import dataclass
from typing import Any

_C_SPACE = b" \t\n\v\f\r"
_HEX = frozenset(b"0123456789abcdefABCDEF")
# what PyOS_string_to_double accepts (no leading space, no underscores, no hex)
_C_FLOAT = re.compile(
    rb"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE
)
_LONG_MAX = 2**63 - 1
_SSIZE_MAX = 2**63 - 1


class TextArgError(ValueError):
    """The C unpickler raises on this argument: the load stops at the opcode."""


@dataclass(frozen=True)
class Ambiguous:
    """A Python 2 byte string (``STRING`` / ``BINSTRING``) that is not ASCII: the unpickler's
    ``encoding`` decides what it becomes (``pickle.load`` refuses it, ``torch.load`` decodes
    UTF-8, ``encoding="latin1"`` or ``"bytes"`` keep every byte)."""

    raw: bytes

    def candidates(self) -> list[str]:
        out = [self.raw.decode("latin-1")]
        with contextlib.suppress(UnicodeDecodeError):
            out.insert(0, self.raw.decode("utf-8"))
        return out


@dataclass(frozen=True)
class Parsed:
    value: Any
    agree: bool = True  # the pure-Python unpickler reads the line to the same value


def _nul_cut(line: bytes) -> bytes:
    i = line.find(b"\0")
    return line if i < 0 else line[:i]


def _c_strtol(s: bytes) -> tuple[int | None, int, bool]:
    """glibc ``strtol(s, &end, 0)``: (value or None when no digits, end index, overflow)."""
    i, n = 0, len(s)
    while i < n and s[i] in _C_SPACE:
        i += 1
    sign = 1
    if i < n and s[i] in b"+-":
        sign = -1 if s[i] == ord("-") else 1
        i += 1
    base = 10
    if i + 2 < n + 1 and s[i : i + 1] == b"0" and s[i + 1 : i + 2] in (b"x", b"X"):
        if i + 2 < n and s[i + 2] in _HEX:
            base, i = 16, i + 2
    elif s[i : i + 1] == b"0":
        base = 8
    start = i
    value = 0
    while i < n:
        c = s[i]
        d = c - 48 if 48 <= c <= 57 else (c | 0x20) - 87 if 97 <= (c | 0x20) <= 122 else 99
        if d >= base:
            break
        value = value * base + d
        i += 1
    if i == start:
        return None, 0, False
    value *= sign
    overflow = not (-_LONG_MAX - 1 <= value <= _LONG_MAX)
    return value, i, overflow


def _py_int(text: bytes, base: int) -> int | None:
    try:
        return int(text, base)
    except ValueError:
        return None


def read_int(line: bytes) -> Parsed:
    """``INT`` (``I``): ``line`` includes its newline. 0/1 written as ``00``/``01`` are bools."""
    if len(line) < 2:
        raise TextArgError("INT without digits")
    s = _nul_cut(line)
    x, end, overflow = _c_strtol(s)
    if x is None or overflow or (end < len(s) and s[end : end + 1] != b"\n"):
        value: Any = _py_int(s, 0)
        if value is None:
            raise TextArgError(f"INT argument {line[:-1]!r} is not an integer")
    else:
        value = bool(x) if len(line) == 3 and x in (0, 1) else x
    py: Any = False if line == b"00\n" else True if line == b"01\n" else _py_int(line, 0)
    return Parsed(value, py is not None and py == value)


def read_long(line: bytes) -> Parsed:
    """``LONG`` (``L``): an integer, usually with a trailing ``L``."""
    if len(line) < 2:
        raise TextArgError("LONG without digits")
    s = line[:-2] if line[-2:-1] == b"L" else line
    value = _py_int(_nul_cut(s), 0)
    if value is None:
        raise TextArgError(f"LONG argument {line[:-1]!r} is not an integer")
    body = line[:-1]
    body = body[:-1] if body[-1:] == b"L" else body
    return Parsed(value, _py_int(body, 0) == value)


def read_index(line: bytes, opcode: str) -> Parsed:
    """``GET`` / ``PUT``: a decimal memo index (``PyLong_FromString(s, NULL, 10)`` in C)."""
    if len(line) < 2:
        raise TextArgError(f"{opcode} without an index")
    value = _py_int(_nul_cut(line), 10)
    if value is None:
        raise TextArgError(f"{opcode} argument {line[:-1]!r} is not an integer")
    if opcode == "PUT" and value < 0:
        raise TextArgError("negative PUT argument")
    if value > _SSIZE_MAX:
        raise TextArgError(f"{opcode} index {value} overflows")
    return Parsed(value, _py_int(line[:-1], 10) == value)


def read_float(line: bytes) -> Parsed:
    """``FLOAT`` (``F``): its value never matters here, only whether each unpickler accepts it."""
    if len(line) < 2:
        raise TextArgError("FLOAT without digits")
    s = _nul_cut(line)
    m = _C_FLOAT.match(s)
    if m is None or s[m.end() : m.end() + 1] not in (b"\n", b""):
        c_ok = False
    else:
        text = m.group(0).lower()
        c_ok = not (float(text) in (float("inf"), float("-inf")) and b"inf" not in text)
    try:
        float(line[:-1])
        py_ok = True
    except ValueError:
        py_ok = False
    if not c_ok:
        if py_ok:  # the pure-Python unpickler goes on where the C one stops
            return Parsed(0.0, False)
        raise TextArgError(f"FLOAT argument {line[:-1]!r} is not a number")
    return Parsed(0.0, py_ok)


def read_string(line: bytes) -> Parsed:
    """``STRING`` (``S``): a quoted, backslash-escaped Python 2 byte string.

    Returns the ``str`` when it is ASCII, else :class:`Ambiguous`. An escape that newer
    Pythons warn about (``\\q``, ``\\777``) reads differently under ``-W error``: not agreed.
    """
    body = line[:-1]
    if not (len(body) >= 2 and body[:1] == body[-1:] and body[:1] in (b"'", b'"')):
        raise TextArgError("the STRING opcode argument must be quoted")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            raw = codecs.escape_decode(body[1:-1])[0]
        except ValueError as e:
            raise TextArgError(f"STRING argument: {e}") from e
    return Parsed(text_of(raw), not caught)


def text_of(raw: bytes) -> str | Ambiguous:
    """A Python 2 byte string as the unpickler's ``encoding`` makes it (see :class:`Ambiguous`)."""
    return raw.decode("ascii") if raw.isascii() else Ambiguous(raw)


def read_unicode(line: bytes) -> str:
    """``UNICODE`` (``V``): raw-unicode-escape, read the same by both unpicklers."""
    try:
        return line[:-1].decode("raw_unicode_escape")
    except UnicodeDecodeError as e:
        raise TextArgError(f"UNICODE argument: {e}") from e


def read_name(line: bytes, ascii_only: bool) -> str:
    """A module or global name line of ``GLOBAL`` (UTF-8) or ``INST`` (ASCII)."""
    if len(line) < 2:
        raise TextArgError("an empty module or global name")
    try:
        return line[:-1].decode("ascii" if ascii_only else "utf-8")
    except UnicodeDecodeError as e:
        raise TextArgError(f"a name that is not {'ASCII' if ascii_only else 'UTF-8'}") from e
