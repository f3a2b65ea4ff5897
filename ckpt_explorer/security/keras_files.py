"""Keras files placed as ``keras.saving.load_model`` reads them.

* A ``.keras`` archive (Keras 3, ``saving_lib._load_model_from_fileobj``): a zip whose
  ``config.json`` is ``json.loads``'ed and rebuilt (:mod:`.keras_config`), whose
  ``model.weights.h5`` is opened by h5py (or ``model.weights.npz`` by ``numpy.load`` with
  ``allow_pickle=False``), ``metadata.json`` read as JSON, and every other member extracted
  as an asset that layers read as files.
* An HDF5 file (``.weights.h5``, a legacy ``.h5`` model): walked by :mod:`.hdf5_walk`; a
  legacy model's ``model_config`` and ``training_config`` attributes are judged as configs.
* A Keras config on its own (``config.json`` of a model saved as a folder, which
  ``load_model(folder)`` reads): judged as a config.
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

from .hdf5_walk import HDF5_MAGIC, walk_hdf5
from .keras_config import KerasJudged, judge_config, looks_like_keras
from .zip_check import BufferFile

CONFIG = "config.json"
WEIGHTS = ("model.weights.h5", "model.weights.npz")
MAX_HDF5_BYTES = 64 * 2**20  # an HDF5 member read into memory for the walk


def is_keras_zip(names: list[str]) -> bool:
    """The members ``load_model`` needs: ``config.json`` and the weights."""
    return CONFIG in names and any(w in names for w in WEIGHTS)


def keras_zip(zf: zipfile.ZipFile, member: Any) -> tuple[str, KerasJudged, list[str]]:
    """The format, the config's verdict and the members' doubts of a ``.keras`` zip;
    ``member(info)`` places any other member (the caller's generic placement: a doubt
    string, or ""). A member zipfile cannot read (encrypted, an unknown method, bad data)
    is a doubt."""
    try:
        return _keras_zip(zf, member)
    except Exception as e:  # zipfile, zlib or the decoders refuse a member
        return "Keras archive", KerasJudged(), [f"a member does not read ({type(e).__name__}: {e})"]


def _keras_zip(zf: zipfile.ZipFile, member: Any) -> tuple[str, KerasJudged, list[str]]:
    doubts: list[str] = []
    judged = KerasJudged()
    try:
        doc = json.loads(zf.read(CONFIG))
    except (ValueError, RecursionError, zipfile.BadZipFile, OSError) as e:
        return "Keras archive", judged, [f"{CONFIG} is not JSON Keras reads ({e})"]
    if not looks_like_keras(doc):
        doubts.append(f"{CONFIG} is not a Keras object (no class_name and config)")
    judged = judge_config(doc, CONFIG)
    for info in zf.infolist():
        if info.filename == CONFIG or info.is_dir():
            continue
        hdf5 = info.filename == WEIGHTS[0]
        why = _hdf5_member(zf, info, judged) if hdf5 else member(info)
        if why:
            doubts.append(f"member {info.filename}: {why}")
    return "Keras archive", judged, doubts


def _hdf5_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, judged: KerasJudged) -> str:
    if info.file_size > MAX_HDF5_BYTES:
        return f"an HDF5 member over {MAX_HDF5_BYTES >> 20} MiB, not walked"
    walk = walk_hdf5(zf.read(info))
    if walk.failed:
        return walk.failed
    _config_attrs(walk.attrs, info.filename, judged)
    return "; ".join(walk.doubts)


def hdf5_file(buf: Any, size: int, local: str | None) -> tuple[str, KerasJudged, list[str]]:
    """The format, the configs' verdict and the doubts of an HDF5 file (``local``: its path
    on this machine, read by h5py directly)."""
    judged = KerasJudged()
    if local is None and size > MAX_HDF5_BYTES:
        return "HDF5", judged, [f"an HDF5 file over {MAX_HDF5_BYTES >> 20} MiB read remotely"]
    walk = walk_hdf5(b"" if local else bytes(buf[:size]), local)
    if walk.failed:
        return "HDF5", judged, [f"an HDF5 file: {walk.failed}"]
    legacy = _config_attrs(walk.attrs, "the HDF5 root", judged)
    return ("HDF5 (legacy Keras model)" if legacy else "HDF5"), judged, list(walk.doubts)


def _config_attrs(attrs: dict[str, str], where: str, judged: KerasJudged) -> bool:
    """Judge a legacy model's config attributes (True: there was one)."""
    found = False
    for key in ("model_config", "training_config"):
        if key not in attrs:
            continue
        found = True
        try:
            doc = json.loads(attrs[key])
        except (ValueError, RecursionError):
            judged.doubts.append(f"{where}: attribute {key} is not JSON")
            continue
        got = judge_config(doc, f"{where} attribute {key}", legacy=True)
        judged.unsafe += got.unsafe
        judged.code += got.code
        judged.doubts += got.doubts
    return found


def beside_pickles(buf: Any, size: int, local: str | None) -> KerasJudged:
    """What Keras would rebuild from a file in which the views found pickles (a polyglot):
    h5py finds an HDF5 superblock at byte 0, 512, 1024, 2048, ... (a user block before it may
    be a pickle), and ``load_model`` opens a ``.keras`` with Python's zipfile, which finds an
    archive after any prefix."""
    out = KerasJudged()
    at = 0
    while at + 8 <= size:
        if bytes(buf[at : at + 8]) == HDF5_MAGIC:
            _name, judged, doubts = hdf5_file(buf, size, local)
            _merge(out, judged, doubts)
            break
        at = 512 if at == 0 else at * 2
    try:
        zf = zipfile.ZipFile(io.BufferedReader(BufferFile(buf, 0, size)))
    except Exception:  # not a zip Python's zipfile opens: load_model refuses it too
        return out
    with zf:
        if is_keras_zip(zf.namelist()):
            _name, judged, doubts = keras_zip(zf, lambda info: "")  # members: the zip views
            _merge(out, judged, doubts)
    return out


def _merge(out: KerasJudged, judged: KerasJudged, doubts: list[str]) -> None:
    out.unsafe += judged.unsafe
    out.code += judged.code
    out.doubts += judged.doubts + doubts


def keras_json(raw: bytes) -> KerasJudged | None:
    """A JSON file that is one Keras object (``config.json`` of a model saved as a folder),
    judged; None when it is not one."""
    if b'"class_name"' not in raw:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not looks_like_keras(doc):
        return None
    return judge_config(doc, "the Keras config")


__all__ = ["beside_pickles", "hdf5_file", "is_keras_zip", "keras_json", "keras_zip"]
