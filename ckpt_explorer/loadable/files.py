"""Static facts the loaders decide on: a folder's names, its index files, what ``torch.load``
would refuse. Nothing here imports a loader or unpickles freely."""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CkptExplorerError
from ..io.dist_version import installed_version
from ..io.location import Location, as_location
from ..readers.hf.sharded_index import read_index_json

COLOSSAL_INDEX_GLOB = "*.index.*json"  # colossalai has_index_file: Path.glob, non-recursive
INDEX_FILE = re.compile(r"(.*?).index((\..*)?).json")  # colossalai's own (unescaped) pattern


def _entry_is_dir(entry: os.DirEntry[str]) -> bool:
    """``entry`` is a folder (a link followed), as ``Path.is_dir`` says: False for a link
    that loops or leads nowhere."""
    try:
        return entry.is_dir()
    except OSError:
        return False


@dataclass(frozen=True)
class Listing:
    """The entries directly inside a folder (names only, sorted)."""

    path: Path | Location
    files: tuple[str, ...]
    dirs: tuple[str, ...]

    @classmethod
    def of(cls, path: Path | Location) -> Listing:
        files: list[str] = []
        dirs: list[str] = []
        where = as_location(path)
        local = where.local_path()
        if local is not None:
            with os.scandir(local) as entries:  # is_dir from the directory entry: no stat each
                for e in sorted(entries, key=lambda e: e.name):
                    (dirs if _entry_is_dir(e) else files).append(e.name)
        else:
            for p in sorted(where.iterdir()):
                (dirs if p.is_dir() else files).append(p.name)
        return cls(path, tuple(files), tuple(dirs))

    def has(self, name: str) -> bool:
        return name in self.files

    def matching(self, pattern: re.Pattern[str]) -> list[str]:
        return [n for n in self.files if pattern.fullmatch(n)]

    def colossal_indexes(self) -> list[str]:
        """What ``has_index_file`` globs: files and folders alike, dotfiles included."""
        names = [*self.files, *self.dirs]
        return sorted(n for n in names if fnmatch.fnmatchcase(n, COLOSSAL_INDEX_GLOB))


def index_doc(path: Path | Location) -> dict[str, Any] | None:
    """The parsed index JSON, or None when it cannot be read as one."""
    try:
        return read_index_json(as_location(path))
    except (CkptExplorerError, OSError):
        return None


def weight_files(doc: dict[str, Any]) -> list[str]:
    """The shard files an index names, as the loaders list them: ``sorted(set(...))``."""
    return sorted(set(doc.get("weight_map", {}).values()))


def torch_version() -> str | None:
    """The installed torch's version, read from its metadata (torch is not imported)."""
    return installed_version("torch")


def weights_only_default() -> bool:
    """``torch.load``'s default ``weights_only``: True since torch 2.6."""
    v = torch_version()
    if v is None:
        return True
    parts = [int(p) for p in re.findall(r"\d+", v)[:2]]
    return tuple(parts) >= (2, 6)


def refused_global(path: Path) -> str | None:
    """The first global ``torch.load(weights_only=True)`` refuses in ``path``, else None."""
    st = path.stat()
    return _refused(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _refused(name: str, mtime_ns: int, size: int) -> str | None:
    from ..security.judge import REFUSED, judge_file

    verdict = judge_file(Path(name))
    for f in verdict.findings:
        if f.rule == REFUSED:
            m = re.search(r"refuses (\S+)", f.message)
            return m.group(1) if m else "a global"
    return None


def is_safetensors(path: Path | Location) -> bool:
    """An 8-byte little-endian header length followed by ``{``."""
    try:
        head = as_location(path).read_range(0, 9)
    except OSError:
        return False
    return len(head) == 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") > 1


def is_torch_file(path: Path | Location) -> bool:
    from ..io.torch_file import sniff_torch

    try:
        return sniff_torch(as_location(path).read_range(0, 16)) is not None
    except OSError:
        return False


def is_torchscript(path: Path) -> bool:
    """A ``torch.jit.save`` archive, told as ``torch.load`` tells it: a zip with a
    ``constants.pkl`` record (``<archive>/constants.pkl``)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            return any(n.partition("/")[2] == "constants.pkl" for n in zf.namelist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return False


def storage_devices(path: Path) -> tuple[str, ...]:
    """The devices a torch.save file's storages are tagged with (``cpu``, ``cuda:0``...), in
    first-seen order; () when its pickle cannot be read here."""
    st = path.stat()
    return _devices(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _devices(name: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    from ..io.torch_file import read_torch_structure

    try:
        structure = read_torch_structure(Path(name))
    except (CkptExplorerError, OSError, ValueError):
        return ()
    return tuple(dict.fromkeys(ref.location for ref in structure.report.storages.values()))


def cuda_device_count() -> int:
    """CUDA devices this process's torch sees (0 without torch or without a GPU)."""
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


@functools.lru_cache(maxsize=1)
def torch_load_dispatches_safetensors() -> bool:
    """Whether the installed ``torch.load`` hands a path ending in ``.safetensors`` to
    ``safetensors.torch.load_file`` (recent torch does, by the suffix alone, before opening
    the file): read from torch's own ``serialization.py``, without importing torch."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    for folder in spec.submodule_search_locations:
        try:
            text = Path(folder, "serialization.py").read_text(encoding="utf-8")
        except OSError:
            continue
        return 'endswith(".safetensors")' in text and "safetensors.torch" in text
    return False
