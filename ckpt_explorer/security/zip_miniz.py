"""A zip archive as torch's reader opens it: miniz (``PyTorchStreamReader``), not ``zipfile``.

``torch.load``, ``torch.jit.load`` and ``torch.export.load`` read archives with miniz, which
finds the end record by scanning back from the end of the file for the *last* signature that
has 22 bytes after it, follows the zip64 locator's offset to the zip64 record (Python's
``zipfile`` reads the record just before the locator instead), takes every offset as absolute
(``zipfile`` shifts them by the bytes found before the central directory), counts entries by
the end record (``zipfile`` by the directory's size), never compares local-header names, finds
a member by a case-insensitive binary search, and refuses a member whose CRC does not match.
:func:`open_miniz` follows ``mz_zip_reader_read_central_dir`` (miniz 3.0.2 as torch ships it)
step for step; :func:`extract` follows ``mz_zip_reader_extract_to_mem``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

EOCD_SIG = b"PK\x05\x06"
Z64_LOCATOR_SIG = b"PK\x06\x07"
Z64_EOCD_SIG = b"PK\x06\x06"
CDH_SIG = b"PK\x01\x02"
LOCAL_SIG = b"PK\x03\x04"
_U32 = 0xFFFFFFFF


class MinizError(ValueError):
    """miniz refuses the archive or the member: torch's load fails before unpickling."""


@dataclass(frozen=True)
class CdEntry:
    """One central-directory record as miniz reads it (offsets absolute in the buffer)."""

    index: int
    name: bytes
    flags: int
    method: int
    crc: int
    comp_size: int
    size: int
    header_offset: int
    cd_offset: int  # where the record itself lies
    record_len: int  # 46 + name + extra + comment
    extra: bytes


@dataclass(frozen=True)
class MinizArchive:
    entries: tuple[CdEntry, ...]
    eocd_offset: int
    cd_offset: int
    cd_size: int
    zip64: bool
    z64_offset: int | None  # where the zip64 record miniz used lies
    comment_len: int
    cd_tail: int  # directory bytes after the last counted record (miniz ignores them)

    @property
    def archive_name(self) -> bytes:
        """What torch takes for the archive's folder: entry 0's name up to its first ``/``."""
        if not self.entries:
            raise MinizError("archive does not contain any files")
        name = self.entries[0].name
        if b"/" not in name:
            raise MinizError(f"file in archive is not in a subdirectory: {name!r}")
        return name.split(b"/", 1)[0]

    def locate(self, name: bytes) -> list[CdEntry]:
        """Every entry ``mz_zip_reader_locate_file(name)`` could return (a case-insensitive
        binary search: with several equal names it returns one of them, which depends on the
        sort)."""
        low = name.lower()
        return [e for e in self.entries if e.name.lower() == low]


def _u16(b: Any, i: int) -> int:
    return int(b[i]) | int(b[i + 1]) << 8


def _u32(b: Any, i: int) -> int:
    return int.from_bytes(bytes(b[i : i + 4]), "little")


def _u64(b: Any, i: int) -> int:
    return int.from_bytes(bytes(b[i : i + 8]), "little")


def locate_eocd(buf: Any, size: int) -> int | None:
    """``mz_zip_reader_locate_header_sig``: the last end-record signature with 22 bytes after
    it, scanning back in 4096-byte blocks until ~64 KiB before the end."""
    if size < 22:
        return None
    cur = max(size - 4096, 0)
    while True:
        n = min(4096, size - cur)
        block = bytes(buf[cur : cur + n])
        i = n - 4
        while i >= 0:
            i = block.rfind(EOCD_SIG, 0, i + 4)
            if i < 0:
                break
            if size - (cur + i) >= 22:
                return cur + i
            i -= 1
        if cur == 0 or size - cur >= 0xFFFF + 22:
            return None
        cur = max(cur - (4096 - 3), 0)


def open_miniz(buf: Any, size: int) -> MinizArchive:
    """The archive miniz sees in ``buf[0:size]``.

    Raises:
        MinizError: miniz's init fails (torch's load raises before any unpickling).
    """
    eocd = locate_eocd(buf, size)
    if eocd is None:
        raise MinizError("no end of central directory record")
    rec = bytes(buf[eocd : eocd + 22])
    zip64 = False
    z64_at: int | None = None
    loc = b""
    z64 = b""
    if eocd >= 20 + 56:
        loc = bytes(buf[eocd - 20 : eocd])
        if loc[:4] == Z64_LOCATOR_SIG:
            z64_at = _u64(loc, 8)
            if z64_at > size - 56:
                raise MinizError("zip64 record offset past the end")
            z64 = bytes(buf[z64_at : z64_at + 56])
            zip64 = z64[:4] == Z64_EOCD_SIG
    total = _u16(rec, 10)
    on_disk = _u16(rec, 8)
    this_disk = _u16(rec, 4)
    cd_disk = _u16(rec, 6)
    cd_size = _u32(rec, 12)
    cd_ofs = _u32(rec, 16)
    if zip64:
        if _u64(z64, 4) < 44:
            raise MinizError("zip64 record too short")
        if _u32(loc, 16) != 1:
            raise MinizError("multi-disk archive")
        total, on_disk = _u64(z64, 32), _u64(z64, 24)
        if total > _U32 or on_disk > _U32 or _u64(z64, 40) > _U32:
            raise MinizError("too many files or too large a directory")
        cd_size = _u64(z64, 40)
        this_disk, cd_disk = _u32(z64, 16), _u32(z64, 20)
        cd_ofs = _u64(z64, 48)
    if total != on_disk:
        raise MinizError("multi-disk archive (entry counts differ)")
    if (this_disk | cd_disk) != 0 and (this_disk != 1 or cd_disk != 1):
        raise MinizError("multi-disk archive")
    if cd_size < total * 46:
        raise MinizError("central directory smaller than its entry count")
    if cd_ofs + cd_size > size:
        raise MinizError("central directory past the end")
    entries = []
    cd = bytes(buf[cd_ofs : cd_ofs + cd_size]) if total else b""
    p, n = 0, cd_size
    for i in range(total):
        if n < 46 or cd[p : p + 4] != CDH_SIG:
            raise MinizError(f"central directory record {i} is not one")
        comp, decomp, lho = _u32(cd, p + 20), _u32(cd, p + 24), _u32(cd, p + 42)
        name_len, extra_len, comment_len = _u16(cd, p + 28), _u16(cd, p + 30), _u16(cd, p + 32)
        method, flags, disk = _u16(cd, p + 10), _u16(cd, p + 8), _u16(cd, p + 34)
        extra = cd[p + 46 + name_len : p + 46 + name_len + extra_len]
        if extra_len and max(comp, decomp, lho) == _U32:
            comp, decomp, lho = _zip64_extra(
                buf, cd_ofs, p, name_len, extra_len, n, extra, comp, decomp, lho
            )
        sized = comp != _U32 and decomp != _U32
        if sized and ((method == 0 and decomp != comp) or (decomp and not comp)):
            raise MinizError(f"entry {i}: sizes that cannot be")
        if disk == 0xFFFF or (disk != this_disk and disk != 1):
            raise MinizError("multi-disk archive")
        if comp != _U32 and lho + 30 + comp > size:
            raise MinizError(f"entry {i} lies past the end")
        if flags & 0x2000:
            raise MinizError("masked local directory (encryption)")
        total_len = 46 + name_len + extra_len + comment_len
        if total_len > n:
            raise MinizError(f"entry {i} runs past the directory")
        entries.append(
            CdEntry(
                i,
                cd[p + 46 : p + 46 + name_len],
                flags,
                method,
                _u32(cd, p + 16),
                comp,
                decomp,
                lho,
                cd_ofs + p,
                total_len,
                extra,
            )
        )
        n -= total_len
        p += total_len
    return MinizArchive(
        tuple(entries), eocd, cd_ofs, cd_size, zip64, z64_at if zip64 else None, _u16(rec, 20), n
    )


def _zip64_extra(
    buf: Any,
    cd_ofs: int,
    p: int,
    name_len: int,
    extra_len: int,
    n: int,
    extra: bytes,
    comp: int,
    decomp: int,
    lho: int,
) -> tuple[int, int, int]:
    """The zip64 extended-information field, read the way miniz 3.0.2 reads it."""
    if 46 + name_len + extra_len > n:  # miniz rereads the extra field from the file
        extra = bytes(buf[cd_ofs + 46 + name_len : cd_ofs + 46 + name_len + extra_len])
    remaining, q = extra_len, 0
    while True:
        if remaining < 4:
            raise MinizError("extra field too short")
        field_id, field_len = _u16(extra, q), _u16(extra, q + 2)
        if field_len + 4 > remaining:
            raise MinizError("extra field runs past its record")
        if field_id == 1:
            break
        q += 4 + field_len
        remaining -= 4 + field_len
        if not remaining:
            break
    if remaining >= 4:
        remaining -= 4
        q += 4
        if decomp == _U32 and remaining >= 8:
            decomp, q, remaining = _u64(extra, q), q + 8, remaining - 8
        if comp == _U32 and remaining >= 8:
            comp, q, remaining = _u64(extra, q), q + 8, remaining - 8
        if lho == _U32 and remaining >= 8:
            lho = _u64(extra, q)
    return comp, decomp, lho


def data_start(buf: Any, size: int, entry: CdEntry) -> int:
    """Where a member's bytes start: after the local header's own name and extra lengths.

    Raises:
        MinizError: no local header there, or the data runs past the end.
    """
    header = bytes(buf[entry.header_offset : entry.header_offset + 30])
    if len(header) < 30 or header[:4] != LOCAL_SIG:
        raise MinizError(f"no local header for {entry.name!r}")
    start = entry.header_offset + 30 + _u16(header, 26) + _u16(header, 28)
    if start + entry.comp_size > size:
        raise MinizError(f"{entry.name!r} runs past the end")
    return start


def extract(buf: Any, size: int, entry: CdEntry, limit: int) -> bytes:
    """The member's bytes as ``mz_zip_reader_extract_to_mem`` gives them (CRC checked).

    Raises:
        MinizError: miniz refuses it (method, encryption, bad deflate stream, CRC).
        OverflowError: the member is bigger than ``limit``.
    """
    if entry.flags & 0x41 or entry.flags & 0x20:
        raise MinizError(f"{entry.name!r} is encrypted or patched")
    if entry.method not in (0, 8):
        raise MinizError(f"{entry.name!r} uses compression method {entry.method}")
    if entry.size > limit:
        raise OverflowError(entry.size)
    start = data_start(buf, size, entry)
    raw = bytes(buf[start : start + entry.comp_size])
    if entry.method == 0:
        data = raw
    else:
        d = zlib.decompressobj(-15)
        try:
            data = d.decompress(raw, entry.size + 1)
        except zlib.error as e:
            raise MinizError(f"{entry.name!r} does not inflate: {e}") from e
        if len(data) != entry.size or not d.eof:
            raise MinizError(f"{entry.name!r} inflates to another size")
    if zlib.crc32(data) != entry.crc:
        raise MinizError(f"{entry.name!r} does not match its CRC")
    return data
