"""The zip view: every member of an archive judged as the loaders that open it would read it.

A canonical archive (:mod:`.zip_check`: torch's reader and Python's ``zipfile`` see the same
members) has each member judged once; any other is never safe, and every member that either
reader exposes is judged anyway, so that a payload is still named. torch's own use of the
archive adds what it alone does: ``<archive>/data.pkl`` through its unpickler (name map,
``weights_only``), ``constants.pkl`` handing the file to ``torch.jit.load`` (its code: verdict ``code``), the
Python modules of a ``torch.package`` archive (``PackageImporter`` imports them: ``code``); ``torch.export``
archives load ``custom_obj_*`` constants with TorchScript's unpickler. Storage records
(``<archive>/data/<key>`` beside a ``data.pkl``) are raw tensor bytes that no loader unpickles:
only their first bytes are looked at, for numpy's ``.npz`` reading of any member that starts
like an ``.npy``.
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Callable
from typing import Any

from .judged import Judged
from .zip_check import BufferFile, ZipLayout, check_zip
from .zip_miniz import EOCD_SIG, LOCAL_SIG, CdEntry, MinizError, data_start

_TAIL = 0xFFFF + 22 + 4096  # how far back from the end either reader looks for an end record
_NPY_MAGIC = b"\x93NUMPY"
_SMALL = 64 * 2**20  # deflated members inflated up to this each (and the file's budget)

Judge = Callable[..., Any]


def may_be_zip(buf: Any, start: int, end: int, head: bytes) -> bool:
    """Whether either reader could take these bytes for an archive (an end record near the
    end, or a local header at the start)."""
    if head[:4] in (LOCAL_SIG, EOCD_SIG):
        return True
    if end - start < 22:
        return False
    return bytes(buf[max(start, end - _TAIL) : end]).find(EOCD_SIG) >= 0


def judge_zip(
    buf: Any, start: int, end: int, where: str, scope: Any, depth: int, judge: Judge
) -> Any:
    out = Judged()
    layout = check_zip(buf, start, end)
    if layout.miniz is None and layout.python is None:
        if bytes(buf[start : start + 4]) == LOCAL_SIG:
            out.formats.append("a damaged zip: neither torch's reader nor zipfile opens it")
        return out  # neither reader opens it: no loader gets a pickle out of it
    scope.archives += 1
    if scope.archives > 4096:
        out.doubts.append(f"{where}: more than 4096 nested archives")
        return out
    if not layout.canonical and not (scope.explained and depth == 0):
        out.doubts += [
            f"{where}: an archive that readers read differently: {p}" for p in layout.problems
        ]
    seen: set[tuple[int, int]] = set()
    if layout.miniz is not None:
        out.add(_torch_members(buf, start, end, where, scope, depth, judge, layout, seen))
    if layout.python is not None and not layout.canonical:
        out.add(_python_members(buf, start, end, where, scope, depth, judge, layout, seen))
    shipped = ("TorchScript archive", "torch.package archive")
    modules = _zipimport_modules(layout) if depth == 0 else []
    if modules and not any(f in shipped for f in out.formats):
        shown = ", ".join(modules[:4]) + (
            f" and {len(modules) - 4} more" if len(modules) > 4 else ""
        )
        out.code.append(
            f"{where}: a zip holding Python modules ({shown}): once the archive is on sys.path "
            "(a .pth path line naming it, PYTHONPATH), zipimport imports them for any import "
            "of their names, such as the optional imports a library's start-up tries"
        )
    return out


def _zipimport_modules(layout: ZipLayout) -> list[str]:
    """Members ``zipimport`` would import (``.py`` / ``.pyc``), as either reader lists them."""
    names = (
        {e.name.decode("utf-8", "replace") for e in layout.miniz.entries} if layout.miniz else set()
    )
    names |= {i.filename for i in layout.python or []}
    return sorted(n for n in names if n.endswith((".py", ".pyc")))


def _torch_members(
    buf: Any,
    start: int,
    end: int,
    where: str,
    scope: Any,
    depth: int,
    judge: Judge,
    layout: ZipLayout,
    seen: set[tuple[int, int]],
) -> Any:
    out = Judged()
    archive = layout.miniz
    assert archive is not None
    try:
        arch = archive.archive_name
    except MinizError:
        arch = b""
    names = {e.name for e in archive.entries}
    torch_zip = bool(arch) and bool(archive.locate(arch + b"/data.pkl"))
    data_pkl = archive.locate(arch + b"/data.pkl") if arch else []
    if len(data_pkl) > 1:
        out.doubts.append(f"{where}: {len(data_pkl)} members torch could take for data.pkl")
    torchscript = bool(arch) and bool(archive.locate(arch + b"/constants.pkl"))
    if torchscript:
        out.code.append(
            f"{where}: a TorchScript archive: torch.jit.load (and torch.load(weights_only=False), "
            "which hands it to torch.jit.load) runs the TorchScript code it holds (code/)"
        )
    modules = _package_modules(arch, names)
    if modules:
        shown = ", ".join(m.decode("utf-8", "replace") for m in modules[:4])
        more = f" and {len(modules) - 4} more" if len(modules) > 4 else ""
        out.code.append(
            f"{where}: a torch.package archive shipping Python modules ({shown}{more}): "
            "PackageImporter.import_module runs them, and load_pickle imports those its "
            "pickles name"
        )
        out.formats.append("torch.package archive")
    if arch and arch + b"/archive_format" in names:
        out.notes.append(f"{where}: a torch.export archive (.pt2)")
        out.formats.append("torch.export archive")
        out.unsafe += _aoti_native_code(where, arch, names)
    elif torchscript:
        out.formats.append("TorchScript archive")
    elif torch_zip:
        out.formats.append("torch.save zip")
    elif any(e.name.endswith(b".npy") for e in archive.entries):
        out.formats.append("npz")
    else:
        out.formats.append("zip archive")
    for e in archive.entries:
        name = e.name.decode("utf-8", "replace")
        label = f"{where} ({name})"
        rest = e.name[len(arch) + 1 :] if arch and e.name.startswith(arch + b"/") else e.name
        if b"/constants/custom_obj_" in b"/" + rest or rest.startswith(b"constants/custom_obj_"):
            out.doubts.append(
                f"{label}: torch.export loads it with TorchScript's unpickler "
                "(torch._C._pickle_load_obj), not judged here"
            )
        try:
            ds = layout.data_starts.get(e.index) or data_start(_Shift(buf, start), end - start, e)
        except MinizError:
            continue  # torch's reader fails on this member: nothing of it is unpickled
        region = (start + ds, start + ds + e.comp_size)
        if region in seen:
            continue
        seen.add(region)
        storage = torch_zip and rest.startswith(b"data/") and rest[5:].isdigit()
        is_pkl = e in data_pkl
        data = _member_bytes(buf, region, e, scope, label, out, head_only=storage)
        if data is None:
            continue
        mbuf, ms, me = data
        if not storage and zlib.crc32(mbuf[ms:me]) != e.crc:
            out.doubts.append(
                f"{label}: does not match its CRC (altered after saving): torch's reader "
                "refuses it, Python's zipfile hands its bytes out before it checks"
            )
        if storage:
            if bytes(mbuf[ms : ms + 6]) == _NPY_MAGIC:
                out.add(judge(mbuf, ms, me, label, scope, depth + 1))
            continue
        out.add(
            judge(
                mbuf,
                ms,
                me,
                label,
                scope,
                depth + 1,
                torch_member=is_pkl,
                top=is_pkl and depth == 0,
            )
        )
    return out


_AOTI_DIR = b"data/aotinductor/"


def _aoti_native_code(where: str, arch: bytes, names: set[bytes]) -> list[str]:
    """What ``torch.export.load`` runs of an AOTInductor package: ``load_pt2`` hands every model
    folder under ``data/aotinductor/`` to ``AOTIModelPackageLoader``, which ``dlopen``s the
    shared library it holds (its constructors run then, before any check of its symbols), or,
    with none, compiles the C++ sources it holds with the flags it holds and loads the result."""
    prefix = arch + b"/" + _AOTI_DIR
    members = sorted(n[len(prefix) :] for n in names if n.startswith(prefix))
    models = sorted({m.split(b"/")[0].decode("utf-8", "replace") for m in members if b"/" in m})
    if not models:
        return []
    native = [m.decode("utf-8", "replace") for m in members if m.endswith((b".so", b".cpp"))]
    shown = ", ".join(n.rsplit("/", 1)[-1] for n in native[:3])
    shown += f" and {len(native) - 3} more" if len(native) > 3 else ""
    held = f"native code ({shown})" if native else "files for its native loader"
    return [
        f"{where}: an AOTInductor package (data/aotinductor/{', '.join(models)}) holding {held}: "
        "torch.export.load (and torch._inductor.aoti_load_package) loads it as a shared "
        "library, compiling its C++ first where it has no library, and that code runs in the "
        "loading process"
    ]


def _package_modules(arch: bytes, names: set[bytes]) -> list[bytes]:
    """The Python modules of a ``torch.package`` archive (one holding
    ``.data/extern_modules``, which ``PackageImporter`` requires): every record ending in
    ``.py``, except under a folder inside ``.data/`` (as ``PackageImporter._add_file`` skips)."""
    if not arch or arch + b"/.data/extern_modules" not in names:
        return []
    out = []
    for name in sorted(names):
        rest = name[len(arch) + 1 :] if name.startswith(arch + b"/") else name
        parts = rest.split(b"/")
        if parts[-1].endswith(b".py") and not (len(parts) > 2 and parts[0] == b".data"):
            out.append(rest)
    return out


# The parameters of _torch_members: the same archive as the other reader lists it (judge_zip
# calls both side by side); the bodies differ (miniz entries vs zipfile's ZipInfo).
def _python_members(
    buf: Any,
    start: int,
    end: int,
    where: str,
    scope: Any,
    depth: int,
    judge: Judge,
    layout: ZipLayout,
    seen: set[tuple[int, int]],
) -> Any:
    """Members as Python's zipfile reads them (only for archives the readers disagree on)."""
    out = Judged()
    assert layout.python is not None
    try:
        import io

        zf = zipfile.ZipFile(io.BufferedReader(BufferFile(buf, start, end)))
    except (zipfile.BadZipFile, OSError, ValueError):
        return out
    with zf:
        for info in layout.python:
            label = f"{where} ({info.filename}, as Python's zipfile reads it)"
            if info.file_size > _SMALL or not scope.take(info.file_size):
                out.doubts.append(f"{label}: {info.file_size} bytes, over the limit to judge")
                continue
            try:
                with zf.open(info) as f:
                    data = f.read(info.file_size + 1)
            except (
                zipfile.BadZipFile,
                OSError,
                ValueError,
                NotImplementedError,
                RuntimeError,
                EOFError,
                zlib.error,
            ):
                continue  # zipfile cannot read it: nothing of it is unpickled this way
            out.add(judge(data, 0, len(data), label, scope, depth + 1))
    return out


class _Shift:
    def __init__(self, buf: Any, start: int) -> None:
        self._buf, self._start = buf, start

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return self._buf[self._start + (key.start or 0) : self._start + key.stop]
        return self._buf[self._start + key]


def _member_bytes(
    buf: Any,
    region: tuple[int, int],
    e: CdEntry,
    scope: Any,
    label: str,
    out: Any,
    head_only: bool,
) -> tuple[Any, int, int] | None:
    """The member's uncompressed bytes as (buffer, start, end): in place when stored."""
    a, b = region
    if e.method == 0:
        if not head_only and hasattr(buf, "madvise") and b - a > 1 << 16:
            import mmap

            buf.madvise(mmap.MADV_WILLNEED, a - a % mmap.PAGESIZE, b - a + a % mmap.PAGESIZE)
        return buf, a, b
    if e.method != 8:
        return None  # torch's reader refuses other methods
    d = zlib.decompressobj(-15)
    want = 16 if head_only else e.size
    if not head_only and (e.size > _SMALL or not scope.take(e.size)):
        out.doubts.append(f"{label}: deflated to {e.size} bytes, over the limit to judge")
        return None
    try:
        data = d.decompress(bytes(buf[a:b]), want + 1)
    except zlib.error:
        return None  # does not inflate: torch's reader fails on it
    return data, 0, len(data)
