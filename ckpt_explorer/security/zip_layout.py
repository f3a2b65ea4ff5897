"""A zip's members as torch's reader sees them: by central directory and local header.

Python's ``zipfile`` refuses a member whose local-header name differs from its central
directory name; torch's reader does not look, so the bytes are read here from the local header
the way torch reads them, and the differences are kept as evidence.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from dataclasses import dataclass
from typing import BinaryIO

from ..io.torch_file import ZIP_MAGIC


@dataclass(frozen=True)
class Member:
    """One central-directory entry and what its local header says."""

    info: zipfile.ZipInfo
    local_name: str | None  # None: no readable local header at header_offset
    data_start: int


def members(zf: zipfile.ZipFile, raw: BinaryIO) -> list[Member]:
    """Every central-directory entry (duplicates included) with its local header's name."""
    out = []
    for info in zf.infolist():
        raw.seek(info.header_offset)
        header = raw.read(30)
        if len(header) < 30 or header[:4] != ZIP_MAGIC:
            out.append(Member(info, None, -1))
            continue
        name_len, extra_len = struct.unpack("<HH", header[26:30])
        local = raw.read(name_len).decode("utf-8", "replace")
        out.append(Member(info, local, info.header_offset + 30 + name_len + extra_len))
    return out


def read_member(raw: BinaryIO, member: Member) -> bytes:
    """The member's uncompressed bytes, read as torch reads them (no name check).

    Raises:
        ValueError: no local header, an unknown compression, or bytes that do not inflate.
    """
    if member.data_start < 0:
        raise ValueError(f"no local header for {member.info.filename}")
    raw.seek(member.data_start)
    data = raw.read(member.info.compress_size)
    if member.info.compress_type == zipfile.ZIP_STORED:
        return data
    if member.info.compress_type == zipfile.ZIP_DEFLATED:
        try:
            return zlib.decompressobj(-15).decompress(data, member.info.file_size + 1)
        except zlib.error as e:
            raise ValueError(f"{member.info.filename} does not inflate: {e}") from e
    raise ValueError(f"{member.info.filename} uses compression {member.info.compress_type}")


def crc_ok(member: Member, data: bytes) -> bool:
    return zlib.crc32(data) & 0xFFFFFFFF == member.info.CRC


def is_pt2(zf: zipfile.ZipFile, raw: BinaryIO) -> bool:
    """True for a torch.export archive: a ``<top>/archive_format`` member reading ``pt2``."""
    for m in members(zf, raw):
        name = m.info.filename
        if name.count("/") == 1 and name.endswith("/archive_format") and m.info.file_size < 64:
            try:
                return read_member(raw, m).strip() == b"pt2"
            except ValueError:
                return False
    return False
