"""The tar view: every member a consumer reads from a tar archive, judged as bytes of its own.

Two consumers open tar archives: ``torch.load`` reads its legacy tar format (members
``storages``, ``tensors`` and ``pickle``, with ``tarfile`` mode ``"r:"``), and
``pandas.read_pickle`` of a ``.tar`` / ``.tar.gz`` / ``.tar.bz2`` / ``.tar.xz`` unpickles the
archive's member whatever its name (``get_handle``: ``tarfile`` mode ``"r"``, which also undoes
gzip, bz2 and xz; an archive of several members is refused there). Every regular member is
judged here (a payload in an archive of several is still named), each in place where the
archive lies uncompressed, and the archive is read with ``tarfile`` itself, as both do.
"""

from __future__ import annotations

import io
import struct
import tarfile
from collections.abc import Callable
from typing import Any

from .judged import Judged, Stream
from .known_formats import MAX_YAML as MAX_TEXT_MEMBER
from .known_formats import text_code
from .pickle_machine import Glob, Tup
from .zip_check import BufferFile

MAX_MEMBERS = 10_000  # tar members listed per archive
_MAX_MEMBER = 64 * 2**20  # a member that must be copied to be read (a sparse one, torch's)
# element sizes of the storage classes torch's legacy formats name
_STORAGE_SIZES = {
    "DoubleStorage": 8, "FloatStorage": 4, "HalfStorage": 2, "BFloat16Storage": 2,
    "LongStorage": 8, "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1, "ByteStorage": 1,
    "BoolStorage": 1, "ComplexDoubleStorage": 16, "ComplexFloatStorage": 8,
    "QInt8Storage": 1, "QUInt8Storage": 1, "QInt32Storage": 4, "UntypedStorage": 1,
}  # fmt: skip


def is_tar(buf: Any, start: int, end: int) -> bool:
    """Whether the first 512 bytes are a tar header with a valid checksum (``tarfile``'s test)."""
    if end - start < 512:
        return False
    block = bytes(buf[start : start + 512])
    field = block[148:156]
    try:
        stored = int(field.replace(b"\0", b" ").strip() or b"x", 8)
    except ValueError:
        return False
    unsigned = sum(block[:148]) + 256 + sum(block[156:])
    signed = sum(struct.unpack("148b", block[:148])) + 256 + sum(struct.unpack("356b", block[156:]))
    return stored in (unsigned, signed)


def judge_tar(
    buf: Any, start: int, end: int, where: str, scope: Any, depth: int, judge: Callable[..., Any]
) -> Judged:
    """Every regular member of the tar archive at ``buf[start:end]``, judged by ``judge`` (the
    views' ``judge_region``), plus torch's reading of ``storages`` and ``tensors``."""
    out = Judged()
    try:
        tar = tarfile.open(  # noqa: SIM115 (closed by the with below)
            fileobj=io.BufferedReader(BufferFile(buf, start, end)), mode="r:"
        )
    except (tarfile.TarError, OSError, ValueError, EOFError):
        return out  # no consumer opens it (torch falls back to the pickle view)
    out.formats.append("tar archive")
    scope.archives += 1
    if scope.archives > 4096:
        out.doubts.append(f"{where}: more than 4096 nested archives")
        return out
    with tar:
        members = _members(tar, where, out)
        files = [m for m in members if m.isreg()]
        single = len(members) == 1
        for member in files:
            label = f"{where} (tar member {member.name}"
            label += ", which pandas.read_pickle unpickles)" if single else ")"
            reader = {"storages": _storages, "tensors": _tensors}.get(member.name)
            if reader is not None or member.issparse():
                data = _copy(tar, member, label, out)
                if data is None:
                    continue
                if reader is not None:
                    reader(data, label, out, scope)
                out.add(judge(data, 0, len(data), label, scope, depth + 1))
                continue
            a = start + member.offset_data
            sub = judge(buf, a, min(a + member.size, end), label, scope, depth + 1)
            if not sub.streams and not sub.doubts and member.size <= MAX_TEXT_MEMBER:
                # a config beside the pickles (a .nemo's model_config.yaml): its code counts
                sub.code += [f"{label}: {c}" for c in text_code(bytes(buf[a : a + member.size]))]
            out.add(sub)
    return out


def zip_in_tar(zipped: Judged, where: str) -> Judged:
    """The zip view of a tar archive whose member is a zip (a tarball of a torch file): only
    Python's ``zipfile`` opens it, through the tar header before it, which is not a doubt
    here: the zip's members are judged by the zip view and the member itself by the tar view."""
    differ = f"{where}: an archive that readers read differently"
    zipped.notes += [
        f"{d} (a zip inside a tar member)" for d in zipped.doubts if d.startswith(differ)
    ]
    zipped.doubts = [d for d in zipped.doubts if not d.startswith(differ)]
    return zipped


def _members(tar: tarfile.TarFile, where: str, out: Judged) -> list[tarfile.TarInfo]:
    """The members ``tarfile`` lists, up to ``MAX_MEMBERS`` (a damaged header ends the list:
    the readers that list the whole archive then fail; what came before is judged)."""
    members: list[tarfile.TarInfo] = []
    try:
        while True:
            member = tar.next()
            if member is None:
                break
            if len(members) == MAX_MEMBERS:
                out.doubts.append(f"{where}: a tar archive of more than {MAX_MEMBERS} members")
                break
            members.append(member)
    except (tarfile.TarError, OSError, ValueError, EOFError) as e:
        out.notes.append(f"{where}: the tar archive's listing stops ({e})")
    return members


def _copy(tar: tarfile.TarFile, member: tarfile.TarInfo, label: str, out: Judged) -> bytes | None:
    if member.size > _MAX_MEMBER:
        out.doubts.append(f"{label}: {member.size} bytes, over the limit to judge")
        return None
    try:
        f = tar.extractfile(member)
        return None if f is None else f.read()
    except (tarfile.TarError, OSError, ValueError, EOFError) as e:
        out.notes.append(f"{label}: cannot be read ({e})")
        return None


# --- torch's legacy tar format: the pickles of ``storages`` and ``tensors`` -----------------


def _chain(data: bytes, at: int, label: str, out: Any, scope: Any) -> Any:
    walk = scope.walk(data, at)
    if walk.did_anything:
        out.streams.append(Stream(f"{label}, pickle at byte {at}", walk, data))
    return walk if walk.complete else None


def _count(walk: Any, label: str, out: Any) -> int | None:
    if isinstance(walk.value, int) and 0 <= walk.value < 10_000_000:
        return int(walk.value)
    out.doubts.append(
        f"{label}: a count the walk cannot read, so the pickles after it are not found"
    )
    return None


def _counted(data: bytes, label: str, out: Any, scope: Any) -> tuple[int | None, int]:
    """The record count a legacy member starts with (its first pickle), and where the
    records start."""
    walk = _chain(data, 0, label, out, scope)
    n = _count(walk, label, out) if walk else None
    return n, walk.end if walk else 0


def _storages(data: bytes, label: str, out: Any, scope: Any) -> None:
    n, at = _counted(data, label, out, scope)
    for _ in range(n or 0):
        args = _chain(data, at, label, out, scope)
        if args is None:
            return
        size = _element_size(args.value)
        if size is None or args.end + 8 > len(data):
            out.doubts.append(f"{label}: a storage record the walk cannot size")
            return
        (numel,) = struct.unpack("<q", data[args.end : args.end + 8])
        at = args.end + 8 + max(numel, 0) * size
    if n is not None:
        _chain(data, at, label, out, scope)  # the storage views


def _tensors(data: bytes, label: str, out: Any, scope: Any) -> None:
    n, at = _counted(data, label, out, scope)
    for _ in range(n or 0):
        args = _chain(data, at, label, out, scope)
        if args is None or args.end + 8 > len(data):
            return
        (ndim,) = struct.unpack("<i", data[args.end : args.end + 4])
        at = args.end + 8 + 16 * max(ndim, 0) + 8


def _element_size(value: Any) -> int | None:
    items = value.items if isinstance(value, Tup) else None
    if not items or len(items) != 3 or not isinstance(items[2], Glob):
        return None
    return _STORAGE_SIZES.get(items[2].ref.name)
