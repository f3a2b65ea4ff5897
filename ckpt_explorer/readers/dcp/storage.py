"""torch's DCP loader reading through the store: a ``StorageReader`` over a folder location.

``dcp.load`` plans which saved items it needs; :meth:`StoreStorageReader.read_data` reads
exactly those items' byte ranges (a local file's items straight from the file; a remote
file's in one batch of range reads) and hands each to the planner
as torch's own reader does: a bytes item as a stream, a tensor item through
``torch.load(weights_only=True)`` narrowed to the requested box. ``read_metadata`` returns the
metadata the allow-list unpickler read; torch never unpickles ``.metadata``.
"""

from __future__ import annotations

import io
import os
import warnings
from collections import defaultdict
from typing import IO, TYPE_CHECKING, Any

from ...errors import TruncatedFileError
from ...io.seekable_raw import SeekableRaw

if TYPE_CHECKING:
    from ...io.location import Location


def store_reader(folder: Location, metadata: Any) -> Any:
    """A ``StorageReader`` reading ``folder``'s data files; ``metadata`` is torch's
    ``Metadata`` (built by :func:`.folder.torch_metadata`)."""
    from torch.distributed.checkpoint.storage import StorageReader

    class StoreStorageReader(StorageReader):
        def __init__(self) -> None:
            super().__init__()
            self.storage_data: dict[Any, Any] = dict(metadata.storage_data)
            self._transforms = _transforms()

        def reset(self, checkpoint_id: Any = None) -> None:
            pass

        @classmethod
        def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
            return False

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            return metadata

        def set_up_storage_reader(self, md: Any, is_coordinator: bool, *args: Any) -> None:
            self.storage_data = dict(md.storage_data)

        def prepare_local_plan(self, plan: Any) -> Any:
            return plan

        def prepare_global_plan(self, plans: Any) -> Any:
            return plans

        def read_data(self, plan: Any, planner: Any) -> Any:
            from torch.futures import Future

            by_file: dict[str, list[Any]] = defaultdict(list)
            for item in plan.items:
                by_file[self.storage_data[item.storage_index].relative_path].append(item)
            for rel, items in by_file.items():
                infos = [self.storage_data[i.storage_index] for i in items]
                data_file = folder / rel
                local = data_file.local_path()
                if local is not None:  # a local file: each item read from the file itself
                    with open(local, "rb") as f:
                        size = os.fstat(f.fileno()).st_size
                        for item, info in zip(items, infos, strict=True):
                            _check_inside(data_file, info, size)
                            raw = io.BufferedReader(_Slice(f, info.offset, info.length))
                            _deliver(item, self._stream(item, info, raw), planner)
                    continue
                blobs = data_file.read_ranges(
                    [(s.offset, s.offset + s.length) for s in infos], keep=False
                )
                for item, info, blob in zip(items, infos, blobs, strict=True):
                    _check_inside(data_file, info, info.offset + len(blob))
                    _deliver(item, self._stream(item, info, io.BytesIO(blob)), planner)
            done: Future[None] = Future()
            done.set_result(None)
            return done

        def _stream(self, item: Any, info: Any, raw: IO[bytes]) -> IO[bytes]:
            descriptors = getattr(info, "transform_descriptors", None) or ()
            if not descriptors or self._transforms is None:
                return raw
            out = self._transforms.transform_load_stream(item, descriptors, raw)
            return io.BytesIO(out.read())  # torch.load needs to seek

    return StoreStorageReader()


def _transforms() -> Any:
    """torch's stream transforms for items saved through DCP extensions (newer torch only)."""
    try:
        from torch.distributed.checkpoint.filesystem import _StorageReaderTransforms
    except ImportError:
        return None
    return _StorageReaderTransforms()


def _check_inside(data_file: Location, info: Any, end: int) -> None:
    if info.offset + info.length > end:
        raise TruncatedFileError(
            data_file,
            f"{info.length} bytes of an item at byte {info.offset}",
            f"a file that ends at byte {end}",
            "The data file is truncated; copy it again from its source.",
        )


class _Slice(SeekableRaw):
    """``length`` bytes of an open file from ``offset``, as a file of their own (pread:
    items of one file share its descriptor)."""

    def __init__(self, f: IO[bytes], offset: int, length: int) -> None:
        super().__init__(length)
        self._fd, self._offset = f.fileno(), offset

    def readinto(self, buffer: Any) -> int:
        n = max(0, min(len(buffer), self._size - self._pos))
        if n == 0:
            return 0
        data = os.pread(self._fd, n, self._offset + self._pos)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


def _deliver(item: Any, stream: IO[bytes], planner: Any) -> None:
    """Give one read item to the planner: bytes as a stream, a tensor narrowed to the box."""
    import torch
    from torch.distributed._shard._utils import narrow_tensor_by_index
    from torch.distributed.checkpoint.planner import LoadItemType

    if item.type == LoadItemType.BYTE_IO:
        planner.load_bytes(item, stream)
        return
    saved = torch.load(stream, map_location="cpu", weights_only=True)
    piece = narrow_tensor_by_index(saved, item.storage_offsets, item.lengths)
    target = planner.resolve_tensor(item).detach()
    if target.size() != piece.size():
        raise ValueError(f"DCP item {item.storage_index}: {tuple(piece.size())} read, "
                         f"{tuple(target.size())} wanted")  # fmt: skip
    target.copy_(piece)
    planner.commit_tensor(item, target)


def dcp_load(state: dict[str, Any], folder: Location, metadata: Any, planner: Any = None) -> None:
    """``dcp.load(state)`` from ``folder`` through the store (one process, no process group)."""
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
        dcp.load(state, storage_reader=store_reader(folder, metadata), planner=planner,
                 no_dist=True)  # fmt: skip
