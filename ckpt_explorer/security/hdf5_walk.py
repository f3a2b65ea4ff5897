"""An HDF5 file's links, datasets and root attributes, read by h5py in a child process.

Keras reads ``.weights.h5``, the ``model.weights.h5`` of a ``.keras`` archive and legacy
``.h5`` models with h5py, walking groups by name and reading datasets into arrays. HDF5 holds
no code, but the library can be made to read other files: an external link opens another
HDF5 file, a dataset with external storage or a virtual dataset reads bytes of other files,
and a filter outside HDF5's own (deflate, shuffle, Fletcher-32, szip, n-bit, scale-offset)
makes the library load a plugin library from ``HDF5_PLUGIN_PATH``. Each of those is a doubt
here. The walk runs in a child process (the HDF5 C library parses hostile bytes there, so a
crash costs the child, not the scan) with a time-out; without h5py the file is not walked.

The child reports the root's string attributes too: a legacy model's ``model_config`` and
``training_config`` (JSON that :mod:`.keras_config` judges).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field

TIMEOUT = 60.0
MAX_OBJECTS = 200_000
BUILTIN_FILTERS = {
    1: "deflate",
    2: "shuffle",
    3: "fletcher32",
    4: "szip",
    5: "nbit",
    6: "scaleoffset",
}
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"

_CHILD = r"""
import io, json, sys
out = {"doubts": [], "attrs": {}, "objects": 0}
try:
    import h5py
except ImportError:
    print(json.dumps({"missing": True})); sys.exit(0)
limit, builtin = int(sys.argv[1]), {int(k) for k in sys.argv[2].split(",")}
source = sys.argv[3] if len(sys.argv) > 3 else io.BytesIO(sys.stdin.buffer.read())
def doubt(msg):
    if len(out["doubts"]) < 12:
        out["doubts"].append(msg)
with h5py.File(source, "r") as f:
    for k, v in f.attrs.items():
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        if isinstance(v, str):
            out["attrs"][k] = v
    def visit(name, link):
        out["objects"] += 1
        if out["objects"] > limit:
            raise OverflowError
        if isinstance(link, h5py.ExternalLink):
            doubt(f"/{name}: an external link to {link.filename!r}:{link.path}: h5py opens that file")
            return
        if isinstance(link, h5py.SoftLink):
            return
        obj = f.get(name)
        if not isinstance(obj, h5py.Dataset):
            return
        plist = obj.id.get_create_plist()
        if plist.get_external_count():
            files = [plist.get_external(i)[0].decode("utf-8", "replace") for i in range(plist.get_external_count())]
            doubt(f"/{name}: a dataset stored in other files {files[:3]}: reading it reads them")
        if obj.is_virtual:
            doubt(f"/{name}: a virtual dataset: reading it reads the files it maps")
        for i in range(plist.get_nfilters()):
            fid = plist.get_filter(i)[0]
            if fid not in builtin:
                doubt(f"/{name}: filter {fid}, not one of HDF5's own: the library loads a plugin for it")
    try:
        f.visititems_links(visit)
    except OverflowError:
        doubt(f"over {limit:,} objects")
print(json.dumps(out))
"""


@dataclass
class HDF5Walk:
    """What the child found: doubts (``missing``: no h5py), the root's string attributes."""

    doubts: list[str] = field(default_factory=list)
    attrs: dict[str, str] = field(default_factory=dict)
    objects: int = 0
    failed: str = ""  # the child could not read the file (why)


def walk_hdf5(data: bytes = b"", path: str | None = None) -> HDF5Walk:
    """Walk an HDF5 file in a child process: the local file ``path`` (h5py reads only what it
    needs), else the bytes ``data``."""
    filters = ",".join(map(str, BUILTIN_FILTERS))
    argv = [sys.executable, "-I", "-c", _CHILD, str(MAX_OBJECTS), filters]
    argv += [path] if path is not None else []
    try:
        done = subprocess.run(
            argv, input=b"" if path else data, capture_output=True, timeout=TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        return HDF5Walk(failed=f"h5py did not finish within {TIMEOUT:g} s")
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [
            f"exit {done.returncode}"
        ]
        return HDF5Walk(failed=f"h5py does not read it ({tail[0][:200]})")
    try:
        report = json.loads(done.stdout)
    except ValueError:
        return HDF5Walk(failed="the h5py walk said nothing readable")
    if report.get("missing"):
        return HDF5Walk(failed="h5py is not installed, so it was not walked")
    return HDF5Walk(
        doubts=list(report["doubts"]), attrs=dict(report["attrs"]), objects=report["objects"]
    )


__all__ = ["HDF5_MAGIC", "HDF5Walk", "walk_hdf5"]
