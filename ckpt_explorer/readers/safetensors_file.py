"""safetensors files: the standard writer, ColossalAI's async writer and its flat optimizer."""

from __future__ import annotations

import json
import operator
import struct
from collections.abc import Sequence
from typing import Any

from ..errors import CorruptCheckpointError, TruncatedFileError, UnsafeCheckpointError
from ..io.location import Location
from ..io.mapped import MappedFile
from ..io.safe_pickle import safe_loads
from ..io.safetensors_header import DTYPES, SafetensorsHeader, read_header
from ..io.stat_cache import cached_by_stat
from ..record_table import RecordTable
from ..types import Detection, FileInfo, TensorRecord
from ..view import CheckpointView
from .optimizer_info import optimizer_info_from_tree, split_state_name


@cached_by_stat(maxsize=256)
def safetensors_header(path: Location) -> SafetensorsHeader:
    """The file's header, read once per (path, mtime, size)."""
    return read_header(path)


def looks_like_safetensors(head: bytes) -> bool:
    """An 8-byte little-endian length followed by ``{``."""
    if len(head) < 9 or head[8:9] != b"{":
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 0 < n < 2**40


# colossalai/utils/safetensors.py builds the header with json.dumps (", " and ": "
# separators) and always puts {"format": "pt"} metadata first; the reference writer (Rust)
# writes compact JSON.
COLOSSAL_HEADER_START = '{"__metadata__": {"format": "pt"'


def _json_encoded_metadata(header: SafetensorsHeader) -> list[str]:
    """Metadata keys (other than ``format``) whose values are themselves JSON documents."""
    found = []
    for key, value in header.metadata.items():
        if key == "format":
            continue
        try:
            json.loads(value)
        except ValueError:
            continue
        found.append(key)
    return found


def probe(path: Location) -> Detection | None:
    if not path.is_file():
        return None
    with path.open("rb") as f:
        head = f.read(9)
    if not looks_like_safetensors(head):
        return None
    header = safetensors_header(path)
    evidence = [f"8-byte header length {header.header_len} followed by a JSON object"]
    names = [e.name for e in header.entries]
    if "non_tensor_keys" in header.metadata or (
        names and all(split_state_name(n) or n == "param_groups" for n in names)
    ):
        marker = (
            "__metadata__.non_tensor_keys"
            if "non_tensor_keys" in header.metadata
            else "keys of the form state.<id>.<name>"
        )
        return Detection(
            str(path),
            "colossalai-flat-optimizer",
            "optimizer",
            (*evidence, f"{marker} → ColossalAI flattened optimizer"),
            "full state_dict" if "param_groups" in names else "optimizer state shard",
        )
    layout = []
    encoded = _json_encoded_metadata(header)
    if encoded:
        layout.append(f"JSON-encoded metadata values ({', '.join(encoded)})")
    if header.packed_without_alignment():
        layout.append("tensors packed without alignment padding")
    if not header.in_canonical_order():
        layout.append("data in write order, not safetensors' (dtype, name) order")
    if layout and header.text_start.startswith(COLOSSAL_HEADER_START):
        return Detection(
            str(path),
            "colossalai-safetensors",
            "model",
            (
                *evidence,
                f"header written by Python's json.dumps starting {COLOSSAL_HEADER_START!r}",
                *layout,
                "→ ColossalAI's own safetensors writer (async save)",
            ),
        )
    if layout:  # another writer: say what is unusual, claim no writer
        return Detection(
            str(path),
            "safetensors",
            "model",
            (*evidence, *layout),
            "written by a writer other than the safetensors library",
        )
    return Detection(str(path), "safetensors", "model", tuple(evidence))


def safetensors_records(path: Location, rel: str) -> tuple[RecordTable, SafetensorsHeader]:
    """Records in on-disk order for one safetensors file (``rel`` is its reported name), as
    columns: a record is made when asked for (see :mod:`..record_table`)."""
    header = safetensors_header(path)
    c = header.columns
    n = len(c.names)
    table = RecordTable.from_columns(
        list(c.names),
        list(map(_TORCH_DTYPE, c.dtypes)),
        c.shapes,
        list(map(operator.sub, c.ends, c.begins)),
        [rel] * n,
        list(map(header.data_start.__add__, c.begins)),
        [MappedFile(path)] * n,
    )
    if any(map(operator.gt, c.begins, c.begins[1:])):  # not in data order: sort, stably
        table = table.take(sorted(range(n), key=c.begins.__getitem__))
    return table, header


_TORCH_DTYPE = {k: v[0] for k, v in DTYPES.items()}.__getitem__


def _record_bytes(path: Location, record: TensorRecord) -> bytes:
    """A record's raw bytes, read from the file (no tensor library needed)."""
    if record.offset is None or not record.nbytes:
        return b""
    with path.open("rb") as f:
        f.seek(record.offset)
        data = f.read(record.nbytes)
    if len(data) != record.nbytes:
        raise TruncatedFileError(
            path,
            f"{record.nbytes} bytes of {record.name} at byte {record.offset}",
            f"{len(data)} bytes",
            "The file is truncated; copy it again from its source.",
        )
    return data


def decode_non_tensor_keys(
    path: Location, records: Sequence[TensorRecord], header: SafetensorsHeader
) -> tuple[list[TensorRecord], dict[str, Any]]:
    """Split a flattened optimizer into tensor records and unpickled non-tensor values."""
    raw = header.metadata.get("non_tensor_keys")
    keys: set[str] = set()
    if raw is not None:
        try:
            parsed = json.loads(raw)
        except ValueError as e:
            raise CorruptCheckpointError(path, "non_tensor_keys as a JSON list", raw[:60]) from e
        if not isinstance(parsed, list):
            raise CorruptCheckpointError(path, "non_tensor_keys as a JSON list", raw[:60])
        keys = {str(k) for k in parsed}
    tensors, values = [], {}
    for r in records:
        if r.name in keys:
            data = _record_bytes(path, r)
            try:
                values[r.name] = safe_loads(data)
            except Exception as e:
                raise UnsafeCheckpointError(
                    path,
                    f"{r.name} to be a pickle of plain values",
                    f"{type(e).__name__}: {e}",
                    "The value was not loaded.",
                ) from e
        else:
            tensors.append(r)
    return tensors, values


def open_safetensors(path: Location, detection: Detection) -> CheckpointView:
    records: Sequence[TensorRecord]
    records, header = safetensors_records(path, path.name)
    values: dict[str, Any] = {f"__metadata__.{k}": v for k, v in header.metadata.items()}
    optimizer = None
    if detection.family == "colossalai-flat-optimizer":
        records, decoded = decode_non_tensor_keys(path, records, header)
        values = {**decoded, **values}
        optimizer = optimizer_info_from_tree(records, decoded)
    return CheckpointView(
        path,
        detection,
        (FileInfo(path.name, header.file_size),),
        RecordTable.from_records(records),
        values,
        optimizer=optimizer,
    )
