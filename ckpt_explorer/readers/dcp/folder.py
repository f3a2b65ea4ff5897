"""torch.distributed.checkpoint (DCP) folders: ``.metadata`` plus ``__R_W.distcp`` files.

torch's own ``FileSystemReader.read_metadata`` runs a free ``pickle.load`` on ``.metadata``.
Here ``.metadata`` goes through the allow-list unpickler instead, into plain values
(:class:`DcpMetadata`, torch-free: listing imports no torch); torch's own metadata objects are
rebuilt from them only when tensor data is read, by torch's DCP loader through a reader whose
``read_metadata`` returns that safely built object. An optimizer saved
in the state (integer ids, or FQN keys from ``get_state_dict``) gets an :class:`OptimizerInfo`
(see :mod:`.optim`); its records keep the names the file gives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import CorruptCheckpointError
from ...io.location import Location, PathLike, as_location
from ...io.safe_pickle import OpaqueObject, PickleReport, safe_loads
from ...io.torch_file import read_torch_bytes
from ...io.torch_names import DType
from ...types import Detection, FileInfo, TensorRecord, shape_numel
from ...view import CheckpointView
from .optim import dcp_optimizer_info

MAX_METADATA_BYTES = 512 * 2**20
MAX_BYTES_ITEM = 16 * 2**20


def probe(path: Location) -> Detection | None:
    meta = path / ".metadata"
    if not meta.is_file():
        return None
    data_files = sorted(p.name for p in path.glob("*.distcp"))
    evidence = [".metadata (DCP metadata pickle)"]
    evidence.append(f"{len(data_files)} .distcp data file(s)" if data_files else "no .distcp files")
    kind = kind_from_names(list(read_metadata(path).state_dict_metadata))
    return Detection(str(path), "torch-dcp", kind, tuple(evidence))


def _state(obj: Any, what: str, path: Location) -> Any:
    if not isinstance(obj, OpaqueObject):
        raise CorruptCheckpointError(path / ".metadata", f"a {what} record", type(obj).__name__)
    return obj.state


def _fields(obj: Any, what: str, path: Location) -> dict[str, Any]:
    state = _state(obj, what, path)
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
        state = {**(state[0] or {}), **state[1]}  # slots dataclasses
    if not isinstance(state, dict):
        raise CorruptCheckpointError(path / ".metadata", f"fields of a {what}", repr(state)[:60])
    return state


@dataclass(frozen=True)
class TensorProperties:
    dtype: DType


@dataclass(frozen=True)
class ChunkMeta:
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class TensorMeta:
    """One tensor of ``state_dict_metadata`` (attribute names as torch's)."""

    properties: TensorProperties
    size: tuple[int, ...]
    chunks: list[ChunkMeta]


@dataclass(frozen=True)
class BytesMeta:
    """A non-tensor item of ``state_dict_metadata``."""


@dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: tuple[int, ...] | None = None
    index: int | None = None


# The field list of DCP's own StorageInfo (torch's names): a record, alike only in shape.
@dataclass(frozen=True)
class StorageInfo:
    relative_path: str
    offset: int
    length: int


@dataclass(frozen=True)
class DcpMetadata:
    """``.metadata`` as plain values, laid out as torch's ``Metadata`` (no torch needed)."""

    state_dict_metadata: dict[str, TensorMeta | BytesMeta]
    storage_data: dict[MetadataIndex, StorageInfo]


def _ints(value: Any, what: str, path: Location) -> tuple[int, ...]:
    if not isinstance(value, tuple | list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise CorruptCheckpointError(path / ".metadata", f"{what} as ints", repr(value)[:60])
    return tuple(value)


def metadata_fields(path: Location) -> dict[str, Any]:
    """The fields of the ``Metadata`` object in ``path/.metadata``, read with the allow-list
    unpickler (no torch)."""
    meta_path = path / ".metadata"
    if meta_path.stat().st_size > MAX_METADATA_BYTES:
        raise CorruptCheckpointError(meta_path, "DCP metadata under 512 MiB", "a larger file")
    try:
        root = safe_loads(meta_path.read_bytes(), PickleReport())
    except Exception as e:
        raise CorruptCheckpointError(
            meta_path, "a DCP metadata pickle", f"{type(e).__name__}: {e}"
        ) from e
    return _fields(root, "Metadata", path)


def read_metadata(path: PathLike) -> DcpMetadata:
    """Parse ``.metadata`` with the allow-list unpickler into plain values (no torch)."""
    path = as_location(path)
    meta_path = path / ".metadata"
    fields = metadata_fields(path)
    sd_meta: dict[str, TensorMeta | BytesMeta] = {}
    for fqn, item in (fields.get("state_dict_metadata") or {}).items():
        qual = getattr(item, "qualified_name", "")
        if qual.endswith("BytesStorageMetadata"):
            sd_meta[str(fqn)] = BytesMeta()
            continue
        f = _fields(item, "TensorStorageMetadata", path)
        props = _state(f["properties"], "TensorProperties", path)
        dtype = props[0] if isinstance(props, tuple) else props.get("dtype")
        if not isinstance(dtype, DType):
            raise CorruptCheckpointError(meta_path, f"a dtype for {fqn}", repr(dtype)[:40])
        chunks = []
        for c in f["chunks"]:
            cf = _fields(c, "chunk", path)
            chunks.append(
                ChunkMeta(_ints(cf["offsets"], "offsets", path), _ints(cf["sizes"], "sizes", path))
            )
        sd_meta[str(fqn)] = TensorMeta(
            TensorProperties(dtype), _ints(f["size"], "a size", path), chunks
        )
    storage: dict[MetadataIndex, StorageInfo] = {}
    for key, info in (fields.get("storage_data") or {}).items():
        k = _fields(key, "MetadataIndex", path)
        v = _fields(info, "_StorageInfo", path)
        offset = k.get("offset")
        index = MetadataIndex(
            fqn=str(k["fqn"]),
            offset=_ints(offset, "an offset", path) if offset is not None else None,
            index=k.get("index"),
        )
        rel = str(v["relative_path"])
        if "/" in rel or "\\" in rel or rel.startswith(".."):
            raise CorruptCheckpointError(meta_path, "data file names inside the folder", repr(rel))
        storage[index] = StorageInfo(rel, int(v["offset"]), int(v["length"]))
    return DcpMetadata(sd_meta, storage)


def torch_metadata(plain: DcpMetadata) -> Any:
    """torch's own ``Metadata`` rebuilt from the plain values (imports torch; for loading)."""
    import torch
    from torch.distributed.checkpoint import metadata as md
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    sd_meta: dict[str, Any] = {}
    for fqn, item in plain.state_dict_metadata.items():
        if isinstance(item, BytesMeta):
            sd_meta[fqn] = md.BytesStorageMetadata()
            continue
        chunks = [
            md.ChunkStorageMetadata(offsets=torch.Size(c.offsets), sizes=torch.Size(c.sizes))
            for c in item.chunks
        ]
        sd_meta[fqn] = md.TensorStorageMetadata(
            properties=md.TensorProperties(dtype=item.properties.dtype.to_torch()),
            size=torch.Size(item.size),
            chunks=chunks,
        )
    storage = {
        md.MetadataIndex(
            fqn=k.fqn,
            offset=torch.Size(k.offset) if k.offset is not None else None,
            index=k.index,
        ): _StorageInfo(v.relative_path, v.offset, v.length)
        for k, v in plain.storage_data.items()
    }
    return md.Metadata(
        state_dict_metadata=sd_meta, storage_data=storage, storage_meta=md.StorageMeta()
    )


def _read_values(path: Location, plain: DcpMetadata, fqn: str, cache: list[Any]) -> Any:
    def load() -> Any:
        import torch

        from .storage import dcp_load

        if not cache:  # one torch Metadata per opened folder, built at the first read
            cache.append(torch_metadata(plain))
        metadata = cache[0]
        item = metadata.state_dict_metadata[fqn]
        out = {fqn: torch.empty(item.size, dtype=item.properties.dtype)}
        dcp_load(out, path, metadata)
        return out[fqn]

    return load


def kind_from_names(names: list[str]) -> str:
    optim = [n for n in names if n.startswith(("optim", "optimizer", "state.")) or ".exp_avg" in n]
    if optim and len(optim) < len(names):
        return "training_state"
    return "optimizer" if optim else "model"


def bytes_items(path: Location, infos: list[StorageInfo | None]) -> list[Any]:
    """Non-tensor DCP items (small torch.save blobs, read with the allow-list unpickler); the
    blobs of each data file are read in one batch. An item too large to read, or one without
    storage, is described instead."""
    out: list[Any] = [None] * len(infos)
    by_file: dict[str, list[int]] = {}
    for i, info in enumerate(infos):
        if info is None or info.length > MAX_BYTES_ITEM:
            out[i] = {"bytes_item": info.length if info else None}
        else:
            by_file.setdefault(info.relative_path, []).append(i)
    for rel, indices in by_file.items():
        data_file = path / rel
        wanted = [infos[i] for i in indices]
        blobs = data_file.read_ranges([(w.offset, w.offset + w.length) for w in wanted if w])
        for i, info, blob in zip(indices, wanted, blobs, strict=True):
            assert info is not None
            if len(blob) < info.length:
                raise CorruptCheckpointError(
                    data_file,
                    f"{info.length} bytes at {info.offset}",
                    f"{len(blob)}",
                    "The file is truncated.",
                )
            out[i] = read_torch_bytes(blob, data_file)
    return out


def open_dcp(path: Location, detection: Detection) -> CheckpointView:
    metadata = read_metadata(path)
    torch_meta: list[Any] = []
    first_chunk: dict[str, Any] = {}
    for index, info in metadata.storage_data.items():
        if index.fqn not in first_chunk or (index.index or 0) < first_chunk[index.fqn][0]:
            first_chunk[index.fqn] = (index.index or 0, info)
    records: list[TensorRecord] = []
    objects = [f for f, item in metadata.state_dict_metadata.items() if isinstance(item, BytesMeta)]
    found = bytes_items(path, [first_chunk.get(f, (0, None))[1] for f in objects])
    values: dict[str, Any] = dict(zip(objects, found, strict=True))
    for fqn, item in metadata.state_dict_metadata.items():
        info = first_chunk.get(fqn, (0, None))[1]
        if not isinstance(item, TensorMeta):
            continue
        dtype = item.properties.dtype
        numel = shape_numel(tuple(item.size))
        records.append(
            TensorRecord(
                name=fqn,
                dtype=str(dtype).removeprefix("torch."),
                shape=tuple(item.size),
                nbytes=numel * dtype.itemsize,
                file=info.relative_path if info else "",
                offset=info.offset if info else None,
                read_values=_read_values(path, metadata, fqn, torch_meta),
            )
        )
    records.sort(key=lambda r: (r.file, r.offset or 0))
    files = [FileInfo(".metadata", (path / ".metadata").stat().st_size)]
    files += [FileInfo(p.name, p.stat().st_size) for p in sorted(path.glob("*.distcp"))]
    optimizer = dcp_optimizer_info(records, values)
    return CheckpointView(
        path, detection, tuple(files), tuple(records), values, optimizer=optimizer and optimizer[1]
    )
