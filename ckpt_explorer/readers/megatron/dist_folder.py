"""An opened megatron-core dist iteration folder (its DCP metadata, storage lookups and
loaders) and the model parameters listed from it: what the model and optimizer parts share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...io.location import Location
from ...types import TensorRecord, shape_numel
from ..dcp.folder import BytesMeta, DcpMetadata, StorageInfo, TensorMeta, bytes_items, read_metadata
from .slices import MetadataCache, region_read_values, whole_read_values


@dataclass(frozen=True)
class ModelParam:
    """A parameter of the model part: its name, the saved key and its layer (stacked keys)."""

    name: str
    key: str
    layer: int | None
    shape: tuple[int, ...]
    dtype: str


class DistFolder:
    """An opened iteration folder: metadata, storage lookups and the loaders' cache."""

    def __init__(self, folder: Location) -> None:
        self.folder = folder
        self.meta: DcpMetadata = read_metadata(folder)
        self.cache = MetadataCache(self.meta)
        self.chunks: dict[str, list[tuple[tuple[int, ...], StorageInfo]]] = {}
        for index, info in self.meta.storage_data.items():
            self.chunks.setdefault(index.fqn, []).append((index.offset or (), info))
        self._objects: dict[str, Any] | None = None

    def tensors(self) -> dict[str, TensorMeta]:
        return {k: v for k, v in self.meta.state_dict_metadata.items() if isinstance(v, TensorMeta)}

    def objects(self) -> list[str]:
        return [k for k, v in self.meta.state_dict_metadata.items() if isinstance(v, BytesMeta)]

    def first_chunk(self, fqn: str, layer: int | None = None) -> StorageInfo | None:
        entries = self.chunks.get(fqn, [])
        if layer is not None:
            entries = [e for e in entries if e[0] and e[0][0] == layer]
        return min(entries, key=lambda e: e[0])[1] if entries else None

    def object_value(self, fqn: str) -> Any:
        if self._objects is None:  # every object's blob at the first ask, in one batch
            names = self.objects()
            found = bytes_items(self.folder, [self.first_chunk(n) for n in names])
            self._objects = dict(zip(names, found, strict=True))
        value = (
            self._objects[fqn]
            if fqn in self._objects
            else bytes_items(self.folder, [self.first_chunk(fqn)])[0]
        )
        while isinstance(value, list) and len(value) == 1:  # ShardedObject data, one level down
            value = value[0]
        return value

    def record(
        self, name: str, fqn: str, meta: TensorMeta, layer: int | None = None
    ) -> TensorRecord:
        """A record of ``fqn`` (of its layer ``layer`` when stacked), loading only that box."""
        dtype = meta.properties.dtype
        size = tuple(meta.size)
        info = self.first_chunk(fqn, layer)
        if layer is None:
            shape, loader = size, whole_read_values(self.folder, self.cache, fqn, size)
        else:
            shape = size[1:]
            offsets = (layer,) + (0,) * len(shape)
            loader = region_read_values(self.folder, self.cache, fqn, offsets, (1, *shape), 1)
        return TensorRecord(
            name=name,
            dtype=dtype.name,
            shape=shape,
            nbytes=shape_numel(shape) * dtype.itemsize,
            file=info.relative_path if info else "",
            offset=info.offset if info else None,
            read_values=loader,
        )
