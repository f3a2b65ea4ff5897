"""Is this zip read the same by torch's reader and by Python's ``zipfile``? (canonical or not)

Two readers open zips in checkpoints: torch's miniz (:mod:`.zip_miniz`) and Python's
``zipfile`` (numpy's ``.npz``, ``torch.export``'s package check, anyone's own code). An archive
they could read differently can hide a pickle from one of them, so :func:`check_zip` accepts an
archive as *canonical* only when its bytes are laid out one way: local records back to back
from byte 0 (each with its data and, where flagged, a data descriptor that agrees with the
directory), then the central directory, then (optionally) a zip64 record and its locator
pointing at it, then the end record with no comment, ending at the last byte; both readers list
the same entries with the same names, offsets, sizes and methods; no two names equal once
lower-cased (miniz looks names up case-insensitively); stored or deflated members only, none
encrypted. Anything else is reported, with the reason, and is never called safe.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, field
from typing import Any

from ..io.seekable_raw import SeekableRaw
from .zip_miniz import (
    LOCAL_SIG,
    CdEntry,
    MinizArchive,
    MinizError,
    _u16,
    _u32,
    _u64,
    data_start,
    open_miniz,
)

_U32 = 0xFFFFFFFF
_DESCRIPTOR_SIG = b"PK\x07\x08"


class BufferFile(SeekableRaw):
    """A read-only, seekable file over ``buf[start:end]`` (bytes or an mmap; nothing copied
    but what is read)."""

    def __init__(self, buf: Any, start: int, end: int) -> None:
        super().__init__(end - start)
        self._buf, self._start = buf, start

    def readinto(self, b: Any) -> int:
        n = max(0, min(len(b), self._size - self._pos))
        at = self._start + self._pos
        b[:n] = self._buf[at : at + n]
        self._pos += n
        return n


@dataclass
class ZipLayout:
    """What the two readers see in one archive, and why it is not canonical (if it is not)."""

    miniz: MinizArchive | None = None
    miniz_error: str = ""
    python: list[zipfile.ZipInfo] | None = None
    python_error: str = ""
    problems: list[str] = field(default_factory=list)
    data_starts: dict[int, int] = field(default_factory=dict)  # entry index -> data offset

    @property
    def canonical(self) -> bool:
        return self.miniz is not None and self.python is not None and not self.problems


def python_view(buf: Any, start: int, end: int) -> list[zipfile.ZipInfo]:
    """The entries ``zipfile.ZipFile`` lists (``header_offset`` relative to ``start``).

    Raises:
        zipfile.BadZipFile, OSError, ValueError: ``zipfile`` cannot open it.
    """
    with zipfile.ZipFile(io.BufferedReader(BufferFile(buf, start, end))) as zf:
        return zf.infolist()


def check_zip(buf: Any, start: int, end: int) -> ZipLayout:
    """Both readers' views of ``buf[start:end]`` and every way they may differ."""
    out = ZipLayout()
    window = _Window(buf, start, end)
    try:
        out.miniz = open_miniz(window, end - start)
    except MinizError as e:
        out.miniz_error = str(e)
    try:
        out.python = python_view(buf, start, end)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, KeyError) as e:
        out.python_error = f"{type(e).__name__}: {e}"
    if out.miniz is None or out.python is None:
        if out.miniz is not None or out.python is not None:
            only = "torch's reader" if out.miniz is not None else "Python's zipfile"
            out.problems.append(f"only {only} opens it ({out.miniz_error or out.python_error})")
        return out
    _compare(out.miniz, out.python, out.problems)
    _layout(window, end - start, out)
    return out


class _Window:
    """``buf`` shifted so that offset 0 is ``start`` (slicing and indexing only)."""

    def __init__(self, buf: Any, start: int, end: int) -> None:
        self._buf, self._start, self._end = buf, start, end

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            a = self._start + (key.start or 0)
            b = min(
                self._end, self._start + (self._end - self._start if key.stop is None else key.stop)
            )
            return self._buf[a : max(a, b)]
        return self._buf[self._start + key]


def _shown(name: bytes) -> str:
    return repr(name.decode("utf-8", "backslashreplace"))


def _name_bytes(info: zipfile.ZipInfo) -> bytes:
    return info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437")


def _compare(m: MinizArchive, py: list[zipfile.ZipInfo], problems: list[str]) -> None:
    if len(m.entries) != len(py):
        problems.append(
            f"torch's reader lists {len(m.entries)} entries, Python's zipfile {len(py)}"
        )
        return
    for e, info in zip(m.entries, py, strict=True):
        same = (
            e.name == _name_bytes(info)
            and e.header_offset == info.header_offset
            and e.comp_size == info.compress_size
            and e.size == info.file_size
            and e.method == info.compress_type
            and e.crc == info.CRC
        )
        if not same:
            problems.append(
                f"entry {e.index} reads as {_shown(e.name)} at byte {e.header_offset} in torch's "
                f"reader and as {info.orig_filename!r} at byte {info.header_offset} in "
                "Python's zipfile"
            )
            return
    seen: dict[bytes, bytes] = {}
    for e in m.entries:
        low = e.name.lower()
        if low in seen:
            what = (
                "twice" if seen[low] == e.name else f"as {_shown(seen[low])} and {_shown(e.name)}"
            )
            problems.append(
                f"member {_shown(e.name)} is named {what}: readers that look names up "
                "differently (miniz ignores case) read different members"
            )
        seen[low] = e.name
        if b"\0" in e.name:
            problems.append(f"member {_shown(e.name)} has a NUL byte in its name")
        if e.method not in (0, 8):
            problems.append(f"member {_shown(e.name)} uses compression method {e.method}")
        if e.flags & 0x61:
            problems.append(f"member {_shown(e.name)} is encrypted or patched")


def _layout(buf: Any, size: int, out: ZipLayout) -> None:
    """Local records back to back from 0, then the directory, zip64 records, end record."""
    m = out.miniz
    assert m is not None
    problems = out.problems
    cursor = 0
    for e in sorted(m.entries, key=lambda x: x.header_offset):
        if e.header_offset != cursor:
            what = "overlaps the one before" if e.header_offset < cursor else "leaves a gap"
            problems.append(
                f"member {_shown(e.name)} starts at byte {e.header_offset}, not {cursor}: it {what}"
            )
            return
        try:
            start = data_start(buf, size, e)
        except MinizError as err:
            problems.append(str(err))
            return
        out.data_starts[e.index] = start
        local = bytes(buf[e.header_offset : e.header_offset + 30])
        name_len = _u16(local, 26)
        local_name = bytes(buf[e.header_offset + 30 : e.header_offset + 30 + name_len])
        if local_name != e.name:
            problems.append(
                f"member {_shown(e.name)} is named {_shown(local_name)} in its local header: tools that "
                "read local headers see another file"
            )
        if _u16(local, 8) != e.method or (_u16(local, 6) ^ e.flags) & 0x0809:
            problems.append(
                f"member {_shown(e.name)}: its local header disagrees with the directory"
            )
        cursor = start + e.comp_size
        if e.flags & 0x08:
            n = _descriptor_len(buf, cursor, e)
            if n is None:
                problems.append(f"member {_shown(e.name)}: no data descriptor that matches it")
                return
            cursor += n
        elif not _local_sizes_match(buf, e, local):
            problems.append(
                f"member {_shown(e.name)}: local header sizes disagree with the directory"
            )
    if cursor != m.cd_offset:
        problems.append(f"the central directory starts at byte {m.cd_offset}, not {cursor}")
    cd_end = m.cd_offset + m.cd_size
    if m.cd_tail:
        problems.append(f"{m.cd_tail} bytes of the central directory hold no counted entry")
    expected_eocd = cd_end
    if m.zip64:
        if m.z64_offset != cd_end or _u64(bytes(buf[cd_end : cd_end + 12]), 4) != 44:
            problems.append(
                "the zip64 locator points at a zip64 record that is not the one right after "
                "the central directory (torch and Python read different records)"
            )
        expected_eocd = cd_end + 56 + 20
    elif bytes(buf[m.eocd_offset - 20 : m.eocd_offset - 16]) == b"PK\x06\x07":
        problems.append("a zip64 locator that torch's reader does not follow")
    if m.eocd_offset != expected_eocd:
        problems.append(
            f"the end record lies at byte {m.eocd_offset}, not right after the directory "
            f"({expected_eocd}): more than one directory or end record"
        )
    if m.comment_len or m.eocd_offset + 22 != size:
        problems.append(
            f"{size - m.eocd_offset - 22} bytes follow the end record (a comment or appended data)"
        )
    _check_counts(buf, m, problems)


def _check_counts(buf: Any, m: MinizArchive, problems: list[str]) -> None:
    """The 32-bit end record agrees with the zip64 one (or holds its placeholders)."""
    rec = bytes(buf[m.eocd_offset : m.eocd_offset + 22])
    n16, size32, ofs32 = _u16(rec, 10), _u32(rec, 12), _u32(rec, 16)
    if _u16(rec, 8) != n16:
        problems.append("the end record counts entries two ways")
    if (
        n16 not in (len(m.entries), 0xFFFF)
        or size32 not in (m.cd_size, _U32)
        or ofs32 not in (m.cd_offset, _U32)
    ):
        problems.append("the end record and the zip64 record disagree")


def _local_sizes_match(buf: Any, e: CdEntry, local: bytes) -> bool:
    crc, comp, size = _u32(local, 14), _u32(local, 18), _u32(local, 22)
    if comp == _U32 or size == _U32:
        return True  # zip64 sizes in the local extra field; the directory's are used
    return (crc, comp, size) == (e.crc, e.comp_size, e.size)


def _descriptor_len(buf: Any, at: int, e: CdEntry) -> int | None:
    """Length of the data descriptor at ``at`` if it matches ``e`` (with or without its
    signature, 32- or 64-bit sizes)."""
    raw = bytes(buf[at : at + 24])
    for skip in (4, 0):
        if skip and raw[:4] != _DESCRIPTOR_SIG:
            continue
        body = raw[skip:]
        if (
            len(body) >= 12
            and (_u32(body, 0), _u32(body, 4), _u32(body, 8))
            == (e.crc, e.comp_size & _U32, e.size & _U32)
            and e.comp_size < _U32
            and e.size < _U32
        ):
            return skip + 12
        if len(body) >= 20 and (_u32(body, 0), _u64(body, 4), _u64(body, 12)) == (
            e.crc,
            e.comp_size,
            e.size,
        ):
            return skip + 20
    return None


__all__ = ["LOCAL_SIG", "BufferFile", "ZipLayout", "check_zip", "python_view"]
