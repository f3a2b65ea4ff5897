"""Writers that follow a plan: safetensors, torch.save zips, DCP folders and indexes.

Each writer streams: it holds at most one tensor's values at a time (fast-path tensors hold
none: their bytes go from file to file in the kernel).
"""

from __future__ import annotations

import collections
import io
import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Cancelled, CkptExplorerError
from ..io.location import Location
from ..readable import parse_size as readable_size
from .atomic import fsync_path
from .bytecheck import OpenFiles
from .fastpath import add_pieces, copy_pieces, piece_bytes
from .flush import WriteBehind
from .plan_types import Piece, PlannedFile, PlannedTensor

if TYPE_CHECKING:
    import torch

    from ..contracts import Cancel

Tick = Callable[[int], None]
ST_DTYPES = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "int16": "I16",
    "uint16": "U16",
    "float16": "F16",
    "bfloat16": "BF16",
    "int32": "I32",
    "uint32": "U32",
    "float32": "F32",
    "float64": "F64",
    "int64": "I64",
    "uint64": "U64",
    "complex64": "C64",
    "float8_e5m2": "F8_E5M2",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e8m0fnu": "F8_E8M0",
}


class ConversionCancelled(Cancelled):
    """The job was cancelled; nothing was left at the destination."""


def parse_size(text: str | int | None) -> int | None:
    """``"5GB"`` -> 5_000_000_000, ``"500MiB"`` -> 524288000, ``1024`` -> 1024 (HF's units)."""
    if text is None or isinstance(text, int):
        return text
    try:
        size = readable_size(text)
    except ValueError:
        raise CkptExplorerError(None, "a size such as 5GB, 500MB or 2GiB", repr(text)) from None
    if size <= 0:
        raise CkptExplorerError(None, "a positive shard size", repr(text))
    return size


def tensor_bytes(t: torch.Tensor) -> torch.Tensor:
    """A contiguous uint8 view of ``t``'s elements (copied only if ``t`` is not dense)."""
    import torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.contiguous().reshape(-1).view(torch.uint8)


def _load(t: PlannedTensor) -> torch.Tensor:
    if t.read_values is None:
        raise CkptExplorerError(None, f"values for {t.name}", "no loader and no byte ranges")
    return t.read_values()


def _check(cancel: Cancel | None) -> None:
    if cancel is not None and cancel.is_set():
        raise ConversionCancelled(None, "the job to finish", "a cancel request")


def data_order(tensors: tuple[PlannedTensor, ...]) -> list[PlannedTensor]:
    """Wider dtypes first, so every tensor starts aligned to its size; within a dtype width,
    where every tensor is copied from source ranges, in the order of its bytes in the sources
    (source file name, then offset), else in plan order.

    In source order, tensors stored back to back are copied (and verified) as one range and
    every source is read front to back: a safetensors file stores its tensors sorted by dtype
    and name as text, which a folder's index or a model's order need not follow. The key uses
    file names, not paths, so one plan writes the same bytes wherever its sources are (local
    or remote, any process)."""

    def itemsize(t: PlannedTensor) -> int:
        n = 1
        for d in t.shape:
            n *= d
        return t.nbytes // n if n else 0

    if not all(t.fast and t.pieces for t in tensors):
        return sorted(tensors, key=lambda t: -itemsize(t))

    def where(t: PlannedTensor) -> tuple[int, str, int]:
        assert t.pieces
        first = t.pieces[0]
        return -itemsize(t), _file_name(first.file), first.offset

    return sorted(tensors, key=where)


def _file_name(file: str | Location) -> str:
    return os.path.basename(file) if isinstance(file, str) else file.name


def write_safetensors(
    path: Path,
    tensors: tuple[PlannedTensor, ...],
    tick: Tick | None = None,
    cancel: Cancel | None = None,
    metadata: dict[str, str] | None = None,
    sync: bool = True,
) -> None:
    """Write a safetensors file in the reference layout (header padded to 8, data packed).

    ``sync``: fsync before returning (a caller passing False fsyncs the file itself).
    """
    order = data_order(tensors)
    header: dict[str, Any] = {"__metadata__": metadata or {"format": "pt"}}
    pos = 0
    for t in order:
        if t.dtype not in ST_DTYPES:
            raise CkptExplorerError(path, "a dtype safetensors can store", f"{t.dtype} ({t.name})")
        header[t.name] = {
            "dtype": ST_DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [pos, pos + t.nbytes],
        }
        pos += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    start = 8 + len(raw)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sources = OpenFiles()
    behind = WriteBehind(fd)  # the disk writes start while the copy goes on
    tick = _also(tick, behind.wrote)
    try:
        os.pwrite(fd, len(raw).to_bytes(8, "little") + raw, 0)
        offset = run_at = start
        run: list[Piece] = []  # copied tensors since run_at, adjoining ranges merged
        for t in order:
            _check(cancel)
            if t.fast:
                assert t.pieces is not None
                run_at = run_at if run else offset
                add_pieces(run, t.pieces)
            else:
                _copy_run(fd, run_at, run, tick, cancel, sources)
                data = tensor_bytes(_load(t))
                if data.numel() != t.nbytes:
                    raise CkptExplorerError(
                        path, f"{t.nbytes} bytes for {t.name}", f"{data.numel()} bytes"
                    )
                _pwrite_all(fd, memoryview(data.numpy()), offset)  # type: ignore[arg-type]
                if tick is not None:
                    tick(t.nbytes)
            offset += t.nbytes
        _copy_run(fd, run_at, run, tick, cancel, sources)
        os.ftruncate(fd, start + pos)
        if sync:
            os.fsync(fd)
    finally:
        behind.close()
        sources.close()
        os.close(fd)


def _also(tick: Tick | None, more: Tick) -> Tick:
    """A tick that calls ``tick`` (if any), then ``more``."""
    if tick is None:
        return more

    def both(n: int) -> None:
        tick(n)
        more(n)

    return both


def _copy_run(
    fd: int,
    at: int,
    run: list[Piece],
    tick: Tick | None,
    cancel: Cancel | None,
    sources: OpenFiles,
) -> None:
    if run:
        copy_pieces(fd, at, tuple(run), tick, cancel, sources)
        run.clear()
        _check(cancel)


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done : done + 256 * 2**20], offset + done)


# ------------------------------------------------------------------------------ torch.save zips


class _Storage:
    """A placeholder pickled as torch's persistent storage id (the bytes are written later)."""

    def __init__(self, key: str, dtype: str, numel: int) -> None:
        self.key, self.dtype, self.numel = key, dtype, numel


class _Tensor:
    """A placeholder pickled exactly as torch pickles a dense CPU tensor."""

    def __init__(self, storage: _Storage, shape: tuple[int, ...]) -> None:
        self.storage, self.shape = storage, shape

    def __reduce__(self) -> Any:
        import torch

        stride: list[int] = []
        acc = 1
        for d in reversed(self.shape):
            stride.append(acc)
            acc *= d
        return (
            torch._utils._rebuild_tensor_v2,
            (
                self.storage,
                0,
                torch.Size(self.shape),
                tuple(reversed(stride)),
                False,
                collections.OrderedDict(),
            ),
        )


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, _Storage):
            import torch

            from ..io.mapped import torch_dtype

            type_name = torch.storage._dtype_to_storage_type_map()[torch_dtype(obj.dtype)]
            return ("storage", getattr(torch, type_name), obj.key, "cpu", obj.numel)
        return None


def _plain(value: Any, where: str, depth: int = 0) -> Any:
    """``value`` if it is made of plain containers and scalars (safe for weights_only)."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if depth > 32:
        raise CkptExplorerError(None, f"a plain value at {where}", "nesting too deep")
    if isinstance(value, list | tuple):
        items = [_plain(v, where, depth + 1) for v in value]
        return type(value)(items) if type(value) in (list, tuple) else tuple(items)
    if isinstance(value, dict):
        return {k: _plain(v, where, depth + 1) for k, v in value.items()}
    raise CkptExplorerError(
        None,
        f"plain values (numbers, strings, lists, dicts) at {where}",
        f"a {type(value).__name__}",
        "Such objects cannot be written to a file that torch.load(weights_only=True) opens.",
    )


def torch_tree(pf: PlannedFile) -> tuple[Any, list[tuple[_Storage, PlannedTensor]]]:
    """The object a torch file holds, with tensor placeholders, and its storages in order."""
    storages: list[tuple[_Storage, PlannedTensor]] = []

    def ref(t: PlannedTensor) -> _Tensor:
        n = 1
        for d in t.shape:
            n *= d
        s = _Storage(str(len(storages)), t.dtype, n)
        storages.append((s, t))
        return _Tensor(s, t.shape)

    if pf.layout == "flat":
        flat: dict[str, Any] = {t.name: ref(t) for t in pf.tensors}
        return flat, storages
    if pf.layout == "param_groups":
        return _plain(pf.values["param_groups"], "param_groups"), storages
    if pf.layout == "state":
        leaves = {t.name: t for t in pf.tensors}
        tree = state_tree(pf, lambda n: ref(leaves[n]) if n in leaves else pf.values[n])
        return tree, storages
    state: dict[int, dict[str, Any]] = {}
    leaves = {t.name: t for t in pf.tensors}
    order: list[str] = list(pf.values.get("__order__", [])) or list(leaves)
    for name in order:
        parts = name.split(".", 2)
        if len(parts) != 3 or parts[0] != "state" or not parts[1].lstrip("-").isdigit():
            raise CkptExplorerError(None, "optimizer names state.<id>.<name>", repr(name))
        slot = state.setdefault(int(parts[1]), {})
        if name in leaves:
            slot[parts[2]] = ref(leaves[name])
        else:
            slot[parts[2]] = _plain(pf.values[name], name)
    if pf.layout == "optimizer_shard":
        return state, storages
    groups = _plain(pf.values.get("param_groups", []), "param_groups")
    return {"state": state, "param_groups": groups}, storages


def state_tree(pf: PlannedFile, leaf: Callable[[str], Any]) -> dict[Any, Any]:
    """The nested object of a "state" file: ``leaf(fqn)`` at each item's original path."""
    from .dcp_state import build_tree

    return build_tree(list(pf.values["__order__"]), pf.values["__paths__"], leaf)


def write_torch(
    path: Path,
    pf: PlannedFile,
    tick: Tick | None = None,
    cancel: Cancel | None = None,
) -> None:
    """Write a torch.save zip (loadable with ``torch.load(weights_only=True)``), one tensor
    at a time, in the record layout torch itself writes."""
    import torch
    from torch.serialization import _get_storage_alignment

    obj, storages = torch_tree(pf)
    buf = io.BytesIO()
    _Pickler(buf, protocol=2).dump(obj)
    data = buf.getvalue()
    writer = torch._C.PyTorchFileWriter(str(path))
    alignment = str(_get_storage_alignment()).encode()
    writer.write_record("data.pkl", data, len(data))
    writer.write_record(".format_version", b"1", 1)
    writer.write_record(".storage_alignment", alignment, len(alignment))
    writer.write_record("byteorder", b"little", len(b"little"))
    for storage, t in storages:
        _check(cancel)
        if t.fast and t.pieces is not None and len(t.pieces) == 1:
            block = piece_bytes(t.pieces[0])  # mapped from the source file, no copy
        else:
            block = tensor_bytes(_load(t))
        if block.storage_offset() or block.untyped_storage().nbytes() != block.numel():
            block = block.clone()
        storage_bytes: Any = block.untyped_storage()
        writer.write_record(f"data/{storage.key}", storage_bytes, block.numel())
        if tick is not None:
            tick(t.nbytes)
        del block
    writer.write_end_of_file()
    del writer
    fsync_path(path)


# Each writer has the Write signature (targets.Write): alike in shape by design.
def write_dcp(
    folder: Path,
    pf: PlannedFile,
    tick: Tick | None = None,
    cancel: Cancel | None = None,
) -> None:
    """Write a torch DCP folder with ``dcp.save`` (no process group); tensors are mapped
    from the source where the reader allows it."""
    import warnings

    import torch.distributed.checkpoint as dcp

    state: dict[str, Any] = {}
    for t in pf.tensors:
        _check(cancel)
        state[t.name] = _load(t)
    for k, v in pf.values.items():
        if not k.startswith("__"):
            state[k] = _plain(v, k)
    folder.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(folder), no_dist=True)
    if tick is not None:
        tick(pf.nbytes)
    for p in folder.iterdir():
        if p.is_file():
            fsync_path(p)


# ------------------------------------------------------------------------------------ indexes


def hf_index(files: list[PlannedFile]) -> dict[str, Any]:
    """The HF index: ``total_size`` in bytes and every tensor name -> its shard."""
    weight_map = {t.name: f.name for f in files for t in f.tensors}
    total = sum(f.nbytes for f in files)
    return {"metadata": {"total_size": total}, "weight_map": weight_map}


def colossalai_optimizer_index(files: list[PlannedFile], group_file: str) -> dict[str, Any]:
    """ColossalAI's optimizer index: ``total_size`` in MiB (float), ids -> shard files."""
    weight_map: dict[str, str] = {}
    total = 0.0
    for f in files:
        if f.layout != "optimizer_shard":
            continue
        for t in f.tensors:
            total += t.nbytes / 2**20
        for name in f.values.get("__order__", []):
            weight_map.setdefault(name.split(".", 2)[1], f.name)
    return {"metadata": {"total_size": total, "param_groups": group_file}, "weight_map": weight_map}


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    fsync_path(path)
