"""The line of a ``.pth`` file that Python's ``site`` module would execute, if any.

``site.addpackage`` (CPython 3.10-3.13) reads every ``*.pth`` of a site directory and
``exec``s each line that starts with ``import `` or ``import\\t``; other lines are paths, and
comment and blank lines are skipped. The first line whose ``exec`` raises ends the file
("Remainder of file ignored"). How the bytes become lines differs:

* 3.10-3.12 iterate a text stream in the locale's encoding: universal newlines (``\\n``,
  ``\\r``, ``\\r\\n``); an undecodable byte raises out of the loop, so only the lines before
  it are reached (a UTF-8 BOM stays part of the first line);
* 3.13 decodes the whole file as UTF-8 (BOM stripped), falling back to the locale's encoding,
  then splits with ``str.splitlines`` (also ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``, NEL, U+2028
  and U+2029); with a UTF-8 locale one undecodable byte means no line is reached. Hidden
  (dot) files are skipped.

Both are modelled with a UTF-8 locale and with a single-byte one (latin-1, which decodes
every byte: the most lenient). The whole file is searched, whatever its size; a candidate line
is reached unless an earlier ``import`` line cannot even compile. Compiling is parsing:
nothing of the file runs here.
"""

from __future__ import annotations

import codecs
import mmap
from dataclasses import dataclass
from typing import Any

from ..io.location import Location

_UNIVERSAL = (b"\n", b"\r")
_SPLITLINES_1 = (b"\n", b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e")
_SPLITLINES_LATIN1 = (*_SPLITLINES_1, b"\x85")
_SPLITLINES_UTF8 = (*_SPLITLINES_1, b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9")
_BOM = codecs.BOM_UTF8
_MAX_LINE = 1 << 20  # an import line longer than this is not compiled: taken as running
_MAX_CANDIDATES = 1_000_000


@dataclass(frozen=True)
class PthLine:
    """An import line that ``site`` reaches: its byte offset, text and when it runs."""

    offset: int
    text: str
    when: str


@dataclass(frozen=True)
class _Model:
    when: str
    encoding: str
    seps: tuple[bytes, ...]
    skip_bom: bool


def _models(name: str) -> list[_Model]:
    hidden = name.startswith(".")
    out = [
        _Model("Python 3.10-3.12, UTF-8 locale", "utf-8", _UNIVERSAL, False),
        _Model("Python 3.10-3.12, single-byte locale", "latin-1", _UNIVERSAL, False),
    ]
    if not hidden:  # 3.13 skips dot files
        out += [
            _Model("Python 3.13, UTF-8", "utf-8", _SPLITLINES_UTF8, True),
            _Model("Python 3.13, single-byte locale", "latin-1", _SPLITLINES_LATIN1, False),
        ]
    return out


def exec_line(path: Location) -> PthLine | None:
    """The first line of ``path`` that ``site`` would ``exec`` under any modelled Python, or
    None (also when the file cannot be read: then ``site`` reads nothing either)."""
    local = path.local_path()
    try:
        if local is not None:
            if local.stat().st_size == 0:
                return None
            with open(local, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _first(mm, path.name)
        return _first(path.read_bytes(), path.name)
    except (OSError, ValueError):
        return None


def _first(buf: Any, name: str) -> PthLine | None:
    size = len(buf)
    candidates = _candidates(buf, size)
    if not candidates:
        return None
    utf8_end = _utf8_valid_prefix(buf)
    for model in _models(name):
        end = size
        if model.encoding == "utf-8" and utf8_end < size:
            if model.skip_bom:
                continue  # 3.13: one bad byte and the whole decode fails
            end = _last_line_end(buf, utf8_end, model.seps)  # 3.10-3.12: lines before it
        start = len(_BOM) if model.skip_bom and bytes(buf[:3]) == _BOM else 0
        found = _walk(buf, candidates, start, end, model)
        if found is not None:
            return found
    return None


def _candidates(buf: Any, size: int) -> list[int]:
    """Where ``import`` followed by a space or tab starts (one pass over the file)."""
    out: list[int] = []
    at = buf.find(b"import", 0, size)
    while at >= 0:
        if bytes(buf[at + 6 : at + 7]) in (b" ", b"\t"):
            out.append(at)
            if len(out) > _MAX_CANDIDATES:
                break
        at = buf.find(b"import", at + 6, size)
    return out


def _utf8_valid_prefix(buf: Any) -> int:
    """How many leading bytes of ``buf`` decode as UTF-8 (all of them: ``len(buf)``)."""
    dec = codecs.getincrementaldecoder("utf-8")()
    step = 1 << 22
    for at in range(0, len(buf), step):
        pending = len(dec.getstate()[0])
        try:
            dec.decode(bytes(buf[at : at + step]), final=at + step >= len(buf))
        except UnicodeDecodeError as e:
            return at - pending + e.start
    return len(buf)


def _last_line_end(buf: Any, end: int, seps: tuple[bytes, ...]) -> int:
    """The end of the last line that is complete before byte ``end``."""
    best = max(buf.rfind(s, 0, end) for s in seps)
    return best + 1 if best >= 0 else 0


def _line_start(buf: Any, at: int, start: int, seps: tuple[bytes, ...]) -> bool:
    if at == start:
        return True
    return any(at - len(s) >= start and bytes(buf[at - len(s) : at]) == s for s in seps)


def _line_end(buf: Any, at: int, end: int, seps: tuple[bytes, ...]) -> int:
    ends = [i for i in (buf.find(s, at, end) for s in seps) if i >= 0]
    return min(ends) if ends else end


def _walk(buf: Any, candidates: list[int], start: int, end: int, model: _Model) -> PthLine | None:
    """The first import line between ``start`` and ``end`` that compiles, unless an earlier
    one that does not compile ends the file first."""
    for at in candidates:
        if at >= end:
            return None
        if at < start or not _line_start(buf, at, start, model.seps):
            continue
        if at == candidates[-1] and len(candidates) > _MAX_CANDIDATES:
            return PthLine(at, "(over a million 'import' words: not followed further)", model.when)
        stop = _line_end(buf, at, end, model.seps)
        line = bytes(buf[at : min(stop, at + _MAX_LINE + 1)])
        text = line.decode(model.encoding, "replace")
        if len(line) <= _MAX_LINE:  # a longer line is not compiled: taken as running
            try:
                compile(text + "\n", "<pth line>", "exec", dont_inherit=True)
            except (SyntaxError, ValueError):
                return None  # its exec raises: the remainder of the file is ignored
            except Exception:  # a limit of the compiler (recursion, memory): taken as running
                pass
        return PthLine(at, text[:120] + ("..." if len(text) > 120 else ""), model.when)
    return None


__all__ = ["PthLine", "exec_line"]
