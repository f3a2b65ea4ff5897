"""Fetch only the structure of each mirrored file, by family, so the local readers can list it.

- small files (JSON, ``latest``, text, small pickles) and legacy torch / plain pickle files:
  whole;
- safetensors: the 8-byte length and the header (plus the pickled values that ColossalAI's
  flat optimizer lists under ``non_tensor_keys``);
- torch zip: end-of-central-directory (zip64 too), the central directory, every record that is
  not tensor data (``data.pkl``, ``byteorder``, ``version``...), and the local header in front
  of each tensor record;
- DCP: ``.metadata`` whole, then the small ``bytes`` items it points into ``.distcp`` files;
- anything else: its first bytes only (what format sniffing reads).
"""

from __future__ import annotations

import json
import struct
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import PurePosixPath

from ..io.location import as_location
from .mirror import WORKERS, Mirror

HEAD = 64 * 2**10
WHOLE = 2 * 2**20  # files up to this size are fetched whole
JSON_LIMIT = 512 * 2**20
_EOCD = b"PK\x05\x06"
_TAIL = HEAD + 22 + 20 + 56  # zip comment (max 64 KiB) + EOCD + zip64 locator + zip64 EOCD
_LOCAL_SLACK = 512  # bytes after a local header's name: torch's alignment padding fits


def fetch_structure(m: Mirror) -> None:
    """Fetch what listing every file of ``m`` reads (files in parallel, bounded)."""
    rels = list(m.remote)
    dcp_dirs = {str(PurePosixPath(r).parent) for r in rels if PurePosixPath(r).name == ".metadata"}
    with ThreadPoolExecutor(min(WORKERS, max(1, len(rels))), "ckpt-structure") as pool:
        for fut in [pool.submit(_one, m, rel, dcp_dirs) for rel in rels]:
            fut.result()
    for d in sorted(dcp_dirs):
        _dcp_bytes_items(m, d)


def _one(m: Mirror, rel: str, dcp_dirs: set[str]) -> None:
    size = m.size(rel)
    name = PurePosixPath(rel).name
    if size <= WHOLE or (name.endswith(".json") and size <= JSON_LIMIT) or name == ".metadata":
        m.ensure_whole([rel])
        return
    head = m.read(rel, 0, min(size, HEAD))
    if str(PurePosixPath(rel).parent) in dcp_dirs and name.endswith(".distcp"):
        return  # raw tensor bytes; its bytes items come from .metadata
    if len(head) >= 9 and head[8:9] == b"{":
        _safetensors(m, rel, head)
    elif head.startswith(b"PK\x03\x04"):
        _torch_zip(m, rel, size)
    elif head[:1] == b"\x80" or head.lstrip()[:1] in (b"{", b"["):
        m.ensure_whole([rel])  # legacy torch / plain pickle / JSON: structure is the file


def _safetensors(m: Mirror, rel: str, head: bytes) -> None:
    (n,) = struct.unpack("<Q", head[:8])
    end = min(8 + n, m.size(rel))
    header = m.read(rel, 0, end)
    if b'"non_tensor_keys"' not in header:
        return
    try:
        doc = json.loads(header[8:])
        keys = json.loads(doc.get("__metadata__", {}).get("non_tensor_keys", "[]"))
        spans = [doc[k]["data_offsets"] for k in keys if isinstance(k, str) and k in doc]
        m.ensure([(rel, 8 + n + int(s), 8 + n + int(e)) for s, e in spans])
    except (ValueError, TypeError, KeyError, AttributeError):
        return  # the local reader reports the malformed header itself


def _torch_zip(m: Mirror, rel: str, size: int) -> None:
    tail_start = max(0, size - _TAIL)
    tail = m.read(rel, tail_start, size)
    at = tail.rfind(_EOCD)
    if at < 0 or len(tail) - at < 22:
        m.ensure_whole([rel])  # no zip directory where it belongs: let the reader judge it all
        return
    _, _, _, _, total, cd_size, cd_offset, _ = struct.unpack("<4s4H2LH", tail[at : at + 22])
    if 0xFFFFFFFF in (cd_size, cd_offset) or total == 0xFFFF:
        loc = tail[at - 20 : at] if at >= 20 else b""
        if len(loc) < 20 or loc[:4] != b"PK\x06\x07":
            m.ensure_whole([rel])
            return
        (z64,) = struct.unpack("<Q", loc[8:16])
        rec = m.read(rel, z64, z64 + 56)
        cd_size, cd_offset = struct.unpack("<2Q", rec[40:56])
    m.ensure([(rel, cd_offset, cd_offset + cd_size)])
    try:
        with zipfile.ZipFile(m.path(rel)) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        m.ensure_whole([rel])
        return
    offsets = sorted({i.header_offset for i in infos} | {cd_offset})
    following = {o: offsets[k + 1] for k, o in enumerate(offsets[:-1])}
    wanted: list[tuple[str, int, int]] = []
    data_members = []
    for info in infos:
        start = info.header_offset
        stop = following.get(start, cd_offset)
        if info.filename.partition("/")[2].startswith("data/"):
            name_len = len(info.orig_filename.encode("utf-8"))
            wanted.append((rel, start, min(stop, start + 30 + name_len + _LOCAL_SLACK)))
            data_members.append(info)
        else:
            wanted.append((rel, start, stop))
    m.ensure(wanted)
    more: list[tuple[str, int, int]] = []
    for info in data_members:
        header = m.read(rel, info.header_offset, info.header_offset + 30)
        if len(header) == 30:
            name_len, extra_len = struct.unpack("<HH", header[26:30])
            more.append((rel, info.header_offset, info.header_offset + 30 + name_len + extra_len))
    m.ensure(more)


def _dcp_bytes_items(m: Mirror, folder: str) -> None:
    """The small pickled items a DCP folder keeps in its .distcp files (read when listing)."""
    from ..readers.dcp import MAX_BYTES_ITEM, read_metadata

    prefix = "" if folder == "." else folder + "/"
    try:
        metadata = read_metadata(as_location(m.path(prefix + ".metadata").parent))
    except Exception:
        return  # the local reader reports an unreadable .metadata itself
    byte_fqns = {
        fqn
        for fqn, item in metadata.state_dict_metadata.items()
        if not hasattr(item, "chunks")  # BytesStorageMetadata: a pickled item
    }
    wanted = []
    for index, info in metadata.storage_data.items():
        rel = prefix + info.relative_path
        if index.fqn in byte_fqns and info.length <= MAX_BYTES_ITEM and rel in m.remote:
            wanted.append((rel, info.offset, info.offset + info.length))
    m.ensure(wanted)
