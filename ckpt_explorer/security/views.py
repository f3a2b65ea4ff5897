"""Every pickle any loader would unpickle from a run of bytes, found by content, never by name.

:func:`judge_region` looks at the bytes the way each real loader does and collects the pickle
streams they would unpickle (walked by :mod:`.pickle_machine`) and everything that keeps the
bytes from being judged completely (*doubts*):

* ``pickle.load`` / ``pandas.read_pickle`` / ``numpy.load``'s fallback / ``torch.load`` of a
  file that is not a zip: a pickle at byte 0; ``torch.load`` goes on through the five pickles
  of its legacy format as long as the values allow (a magic number it cannot rule out is
  followed), and first tries the legacy tar format (:mod:`.views_archive`);
* ``joblib.load``: the same pickle, with each ``NumpyArrayWrapper``'s array read from the
  stream where joblib reads it (an object array is a pickle of its own there);
* zips (torch's reader and Python's ``zipfile``, :mod:`.views_zip`): every member, each judged
  as bytes of its own (``data.pkl``, ``.npz`` members, ``.pt2`` weights, nested archives);
* tar archives (torch's legacy format, ``pandas.read_pickle``), every member judged
  (:mod:`.views_archive`); compressed streams decoded as leniently as joblib and pandas
  decode them, pandas' choice by the file's suffix included (:mod:`.views_compressed`);
* ``.npy`` object arrays, the pickled values of ColossalAI's flattened optimizer safetensors.
"""

from __future__ import annotations

import re
from typing import Any

from . import views_archive, views_compressed, views_misc, views_zip
from .judged import Judged, Scope, Stream
from .pickle_machine import BigBytes, Glob, Made, PickleWalk, Tup

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C  # torch's legacy format, first of its five pickles
PROTOCOL_VERSION = 1001
LEGACY_PICKLES = ("magic number", "protocol version", "system info", "data", "storage keys")
MAX_DEPTH = 4  # containers within containers (a zip in a zip in a gzip ...)
MAX_ARCHIVES = 4096  # nested archives per file
_JOBLIB_WRAPPERS = {"joblib.numpy_pickle.NumpyArrayWrapper"}
_JOBLIB_OLD = {
    "joblib.numpy_pickle.NDArrayWrapper",
    "sklearn.externals.joblib.numpy_pickle.NDArrayWrapper",
}
_SIMPLE_DTYPE = re.compile(r"[<>|=]?([biufcmMO])(\d+)")


def judge_region(
    buf: Any,
    start: int,
    end: int,
    where: str,
    scope: Scope,
    depth: int = 0,
    *,
    torch_member: bool = False,
    top: bool = False,
) -> Judged:
    """Everything the loaders would unpickle from ``buf[start:end]``.

    Args:
        where: how messages name these bytes ("model.pt", "model.pt (archive/data.pkl)").
        torch_member: the bytes are the ``data.pkl`` of a torch zip (torch's own name map
            and ``weights_only`` apply).
        top: the bytes are a whole file (what ``torch.load`` of the file reads).
    """
    out = Judged()
    if depth > MAX_DEPTH:
        out.doubts.append(f"{where}: containers nested more than {MAX_DEPTH} deep")
        return out
    head = bytes(buf[start : start + 16])
    tar = views_archive.is_tar(buf, start, end)
    if views_zip.may_be_zip(buf, start, end, head):
        zipped = views_zip.judge_zip(buf, start, end, where, scope, depth, judge_region)
        out.add(views_archive.zip_in_tar(zipped, where) if tar else zipped)
    # a zip too (pickle.load stops at its "P" unless the unpickler has a persistent_load)
    torch_loads = top and (torch_member or scope.torch_suffix) and head[:4] != views_zip.LOCAL_SIG
    out.add(_pickle_chain(buf, start, end, where, torch_member, torch_loads, scope, depth))
    if tar:
        out.add(views_archive.judge_tar(buf, start, end, where, scope, depth, judge_region))
    if head.startswith(b"\x93NUMPY"):
        out.add(views_misc.judge_npy(buf, start, end, where, scope))
    name = scope.name if top else ""  # pandas.read_pickle decompresses by the file's suffix
    out.add(
        views_compressed.judge_streams(
            buf, start, end, where, head, scope, depth, judge_region, name
        )
    )
    out.add(views_misc.judge_safetensors_values(buf, start, end, where, head, scope))
    return out


def _pickle_chain(
    buf: Any,
    start: int,
    end: int,
    where: str,
    torch_member: bool,
    torch_loads: bool,
    scope: Scope,
    depth: int,
) -> Judged:
    """The pickle at ``start`` and, as ``torch.load`` reads a non-zip file, the ones after it.

    ``torch_loads``: ``torch.load`` itself reads these bytes (a file, or a top-level
    ``data.pkl``), so torch's ``weights_only`` verdict is worth giving.
    """
    out = Judged()
    first = scope.walk(buf, start, end, torch_zip=torch_member)
    if not first.did_anything and not first.limit:
        return out  # the load fails at once (a limit reached is a doubt: judged below)
    out.streams.append(Stream(where, first, buf, torch_loads))
    out.add(nested_loads(first, buf, where, scope, depth))
    out.formats.append("torch data.pkl" if torch_member else "pickle")
    names = {g.qualified for g in first.globals}
    if names & _JOBLIB_WRAPPERS:
        out.add(_joblib(buf, start, end, where, scope, depth))
    if names & _JOBLIB_OLD:
        out.doubts.append(
            f"{where}: an old joblib NDArrayWrapper, which makes joblib.load numpy.load another "
            "file named in the pickle; that file is not judged here"
        )
    if torch_member or not first.complete:
        return out
    value = first.value
    if isinstance(value, int) and not isinstance(value, bool) and value != MAGIC_NUMBER:
        return out  # torch.load stops: "Invalid magic number"
    at = first.end
    legacy = value == MAGIC_NUMBER
    torch_loads = torch_loads or legacy  # torch.load reads a legacy file under any name
    out.streams[0].torch_loads = torch_loads
    for i, name in enumerate(LEGACY_PICKLES[1:], start=1):
        walk = scope.walk(buf, at, end)
        label = f"the {name} pickle" if legacy else f"pickle {i + 1} after it"
        if walk.did_anything:
            out.streams.append(Stream(f"{where}, {label}", walk, buf, torch_loads))
            out.add(nested_loads(walk, buf, f"{where}, {label}", scope, depth))
        if not walk.complete:
            break
        if i == 1 and isinstance(walk.value, int) and walk.value != PROTOCOL_VERSION:
            break  # torch.load stops: "Invalid protocol version"
        at = walk.end
    if legacy:
        out.formats.append("legacy torch file")
    return out


def nested_loads(walk: PickleWalk, buf: Any, where: str, scope: Scope, depth: int) -> Judged:
    """What the pickle's byte loaders load (``torch.storage._load_from_bytes(b)`` is
    ``torch.load(b, weights_only=False)``, see :mod:`.byte_loaders`): each ``b`` is judged as a
    file of its own, all of them. Byte constants that merely look like pickles are walked too,
    all of them, where only code found in them counts (nothing is known to load them)."""
    out = Judged()
    for at, loader, data in walk.nested_loads:
        label = f"{where}, the bytes {loader} loads at byte {at}"
        if isinstance(data, BigBytes):
            out.add(
                judge_region(buf, data.offset, data.offset + data.length, label, scope, depth + 1)
            )
        else:
            out.add(judge_region(data, 0, len(data), label, scope, depth + 1))
    walk.nested_loads = []  # judged: nothing left for judge.stream_findings to refuse
    out.streams += _embedded(walk, buf, where, scope)
    return out


def _embedded(walk: PickleWalk, buf: Any, where: str, scope: Scope) -> list[Stream]:
    """Every byte constant of ``walk`` (and of those, and so on: each lies inside the one
    before) that looks like a pickle, walked within the file's budgets."""
    out: list[Stream] = []
    todo = [(walk, buf, where)]
    while todo:
        outer, data, label = todo.pop()
        for offset, inner in outer.embedded:
            inner_where = f"{label}, a pickle embedded as bytes at byte {offset}"
            if isinstance(inner, BigBytes):
                found = scope.walk(data, inner.offset, inner.offset + inner.length)
                inner_buf = data
            else:
                found = scope.walk(inner)
                inner_buf = inner
            out.append(Stream(inner_where, found, inner_buf, only_code=True))
            if found.embedded:
                todo.append((found, inner_buf, inner_where))
        outer.embedded = []
    return out


def _joblib(buf: Any, start: int, end: int, where: str, scope: Scope, depth: int) -> Judged:
    """The stream as ``joblib.load`` reads it: each array's bytes skipped where joblib reads
    them, and an object array's own pickle walked."""
    out = Judged()

    def on_build(m: Any, at: int, made: Made) -> None:
        if made.by is None or made.by.qualified not in _JOBLIB_WRAPPERS:
            return
        if m.frame_end is not None and m.pos < m.frame_end:
            out.doubts.append(f"{where}: a joblib array inside a pickle frame at byte {at}")
            return
        size, has_object, pad = _wrapper_layout(made.state)
        if size is None:
            out.doubts.append(f"{where}: a joblib array at byte {at} whose size cannot be known")
            return
        pos = m.pos
        if pad and not has_object:  # joblib aligns numeric arrays only
            pad_len = int(m.data[pos]) if pos < m.limit else 0
            pos += 1 + pad_len
        m.frame_end = None  # the frame ended with this BUILD; the array follows it
        if has_object:
            inner = scope.walk(m.data, pos, m.limit)
            out.streams.append(Stream(f"{where}, the object array at byte {pos}", inner, buf))
            if not inner.complete:
                m.pos = m.limit
                return
            m.pos = inner.end
        else:
            m.pos = min(pos + size, m.limit)

    walk = scope.walk(buf, start, end, on_build=on_build)
    out.streams.append(Stream(f"{where}, as joblib.load reads it", walk, buf))
    out.formats.append("joblib")
    for s in list(out.streams):  # what their byte loaders load (after the walk: one at a time)
        out.add(nested_loads(s.walk, buf, s.where, scope, depth))
    return out


def _wrapper_layout(state: Any) -> tuple[int | None, bool, bool]:
    """(array bytes, object dtype, alignment byte) of a NumpyArrayWrapper's state, or
    (None, ...) when the walk cannot compute them."""
    items = state.items if state is not None and hasattr(state, "items") else None
    if not isinstance(items, dict):
        return None, False, False
    shape, dtype = items.get("shape"), items.get("dtype")
    pad = isinstance(items.get("numpy_array_alignment_bytes"), int)
    if not isinstance(shape, Tup) or shape.items is None:
        return None, False, pad
    count = 1
    for n in shape.items:
        if not isinstance(n, int) or n < 0:
            return None, False, pad
        count *= n
    itemsize, has_object = _dtype_size(dtype)
    if has_object:
        return 0, True, pad
    return (None if itemsize is None else count * itemsize), False, pad


def _dtype_size(dtype: Any) -> tuple[int | None, bool]:
    """(itemsize, object dtype) of a pickled ``numpy.dtype(str, False, True)`` + its state."""
    if not isinstance(dtype, Made) or dtype.by is None or dtype.by.name != "dtype":
        return None, False
    args = dtype.args.items if isinstance(dtype.args, Tup) else None
    state = dtype.state.items if isinstance(dtype.state, Tup) else None
    if not args or not isinstance(args[0], str):
        return None, False
    if state and len(state) >= 8 and isinstance(state[7], int) and state[7] & 1:
        return None, True  # NPY_ITEM_REFCOUNT: holds Python objects
    m = _SIMPLE_DTYPE.fullmatch(args[0])
    if m and m.group(1) == "O":
        return None, True
    if state and len(state) >= 6 and isinstance(state[5], int) and state[5] > 0:
        return state[5], False  # flexible types (U, S, V) carry their element size here
    if m:
        return int(m.group(2)), False
    return None, False


__all__ = ["Glob", "Judged", "Scope", "Stream", "judge_region"]
