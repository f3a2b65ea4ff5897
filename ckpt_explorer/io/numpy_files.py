"""NumPy ``.npy`` / ``.npz`` files told apart from checkpoints: what they hold, from their
headers only (numpy's own header reader, which evaluates a literal and nothing else).

Numeric arrays are data a program reads with ``np.load``, not a checkpoint: the readers say so
(and ``validate`` exits 2, "not a checkpoint") instead of calling the file damaged. numpy warns
when it reads a header written by Python 2 (``(3L, 4L)``); the warning is caught here and
kept as a note, never printed.
"""

from __future__ import annotations

import io
import warnings
import zipfile
from typing import Any

NPY_MAGIC = b"\x93NUMPY"
MAX_HEADER = 1 << 20
MAX_LISTED = 6
PY2 = "its header was written by numpy under Python 2"


def npy_header(f: Any) -> tuple[str, tuple[int, ...], list[str]]:
    """(dtype, shape, notes) of the ``.npy`` read from ``f``; raises ValueError when numpy
    refuses the header. ``notes`` holds what numpy warned while reading it."""
    from numpy.lib import format as npformat

    impl = getattr(npformat, "_read_array_header", None)
    if impl is None:  # numpy 2 keeps it in its private module
        import importlib

        impl = importlib.import_module("numpy.lib._format_impl")._read_array_header
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        version = npformat.read_magic(f)
        shape, _fortran, dtype = impl(f, version, max_header_size=MAX_HEADER)
    notes = [PY2 if "Python 2" in str(w.message) else str(w.message) for w in seen]
    name = "object" if dtype.hasobject else str(dtype)
    return name, tuple(int(d) for d in shape), notes


def describe_npy(head: bytes) -> str | None:
    """One phrase for a ``.npy`` whose first bytes (header included) are ``head``; None when
    it is not one."""
    if not head.startswith(NPY_MAGIC):
        return None
    try:
        dtype, shape, notes = npy_header(io.BytesIO(head))
    except Exception:  # numpy refuses the header (or it is cut short): say only the magic
        return "a NumPy .npy file (its header does not read)"
    dims = "x".join(map(str, shape)) or "scalar"
    what = "a pickled object array" if dtype == "object" else f"numeric data, {dtype} {dims}"
    note = f" ({notes[0]})" if notes else ""
    return f"a NumPy .npy array file ({what}), not a checkpoint{note}"


def describe_npz(zf: zipfile.ZipFile) -> str | None:
    """One phrase for a zip whose every member is an ``.npy`` (``numpy.savez``); None when
    it is not one."""
    names = [i.filename for i in zf.infolist() if not i.is_dir()]
    if not names or not all(n.endswith(".npy") for n in names):
        return None
    arrays = []
    for n in names[:MAX_LISTED]:
        try:
            with zf.open(n) as member:
                dtype, shape, _ = npy_header(io.BufferedReader(member))  # type: ignore[arg-type]
        except Exception:
            arrays.append(n[: -len(".npy")])
            continue
        arrays.append(f"{n[: -len('.npy')]} {dtype} {'x'.join(map(str, shape)) or 'scalar'}")
    more = f", … {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
    return f"a NumPy .npz archive of {len(names)} array(s) ({', '.join(arrays)}{more}), not a checkpoint"


NOT_A_CHECKPOINT_HINT = (
    "It is data for np.load, not a training checkpoint; point ckpt-explorer at a checkpoint "
    "(torch.save, safetensors, a training-state folder)."
)
