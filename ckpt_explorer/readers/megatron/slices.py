"""One region of a DCP tensor, read without the rest: a layer of a stacked megatron-core key.

torch's DCP loader reads what its planner asks for. The planner here asks for one box of
the saved tensor (``offsets`` / ``sizes``): torch's own ``create_read_items_for_chunk_list``
turns it into reads of exactly the saved chunks that overlap it (one layer of a
``(num_layers, ...)`` stack is its own chunk(s), so only that layer's bytes are read), and
every read lands in the box's tensor. The metadata is the one the allow-list unpickler read
(:func:`..dcp.folder.torch_metadata`), given to a reader over the store (:mod:`..dcp.storage`);
``.metadata`` is never unpickled by torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...io.location import Location
from ..dcp.folder import DcpMetadata, torch_metadata
from ..dcp.storage import dcp_load

if TYPE_CHECKING:
    import torch


class MetadataCache:
    """torch's ``Metadata`` for one opened folder, built at the first read."""

    def __init__(self, plain: DcpMetadata) -> None:
        self.plain = plain
        self._built: Any = None

    def get(self) -> Any:
        if self._built is None:
            self._built = torch_metadata(self.plain)
        return self._built


def load_region(
    folder: Location,
    cache: MetadataCache,
    fqn: str,
    offsets: tuple[int, ...],
    sizes: tuple[int, ...],
) -> torch.Tensor:
    """The box ``offsets`` / ``sizes`` of the saved tensor ``fqn`` (global coordinates)."""
    import torch
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata
    from torch.distributed.checkpoint.planner import LoadPlan, ReadItem
    from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

    metadata = cache.get()
    item = metadata.state_dict_metadata[fqn]
    out = torch.empty(sizes, dtype=item.properties.dtype)
    box = ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=torch.Size(sizes))

    class _Box(DefaultLoadPlanner):
        def create_local_plan(self) -> LoadPlan:
            return LoadPlan(create_read_items_for_chunk_list(fqn, item, [box]))

        def resolve_tensor(self, read_item: ReadItem) -> torch.Tensor:
            target = out
            for dim, (start, length) in enumerate(
                zip(read_item.dest_offsets, read_item.lengths, strict=True)
            ):
                target = target.narrow(dim, start, length)
            return target

    dcp_load({fqn: out}, folder, metadata, _Box())
    return out


# load_region's parameters, deferred: the loader a record keeps until its bytes are asked for.
def region_read_values(
    folder: Location,
    cache: MetadataCache,
    fqn: str,
    offsets: tuple[int, ...],
    sizes: tuple[int, ...],
    drop_leading: int = 0,
) -> Callable[[], torch.Tensor]:
    """A record loader for a box of ``fqn``; ``drop_leading`` size-1 axes are squeezed off
    (a layer of a stacked key is ``(1, *shape)`` in the file, ``shape`` as a parameter)."""

    def load() -> torch.Tensor:
        t = load_region(folder, cache, fqn, offsets, sizes)
        return t.reshape(sizes[drop_leading:])

    return load


def whole_read_values(
    folder: Location, cache: MetadataCache, fqn: str, size: tuple[int, ...]
) -> Callable[[], torch.Tensor]:
    return region_read_values(folder, cache, fqn, (0,) * len(size), size)
