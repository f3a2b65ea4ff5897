"""Sharded checkpoints behind an index JSON: HF and ColossalAI models and optimizers.

Also rebuilds the index of an interrupted ColossalAI pipeline save from ``tmp_index_files/``
the way ColossalAI's own merge does (``os.listdir`` order, last writer wins).
"""

from __future__ import annotations

import functools
import operator
import re
from dataclasses import dataclass
from itertools import repeat
from typing import Any, cast

from ...errors import CorruptCheckpointError, FormatDetectionError
from ...io.json_doc import json_document
from ...io.location import Location, PathLike, as_location
from ...io.paths import resolve_inside
from ...record_table import RecordTable
from ...types import Detection, FileInfo
from ...view import CheckpointView
from ..optimizer_info import optimizer_info_from_tree

MAX_INDEX_BYTES = 256 * 2**20
INDEX_NAME = re.compile(r"(.*?)\.index((\..*)?)\.json$")
HF_SHARD = re.compile(r"-\d{5}-of-\d{5}\.")
STAGE_SHARD = re.compile(r"-stage-(\d{5})(?:-(\d{5}))?-shard-(\d{5})")
COLOSSAL_SHARD = re.compile(r"-\d{5}\.(bin|safetensors)$")
TMP_DIR = "tmp_index_files"


@dataclass(frozen=True)
class IndexDoc:
    """A parsed index: weight_map in file order, its metadata, and where it came from."""

    source: Location
    root: Location
    weight_map: dict[str, str]
    metadata: dict[str, Any]
    rebuilt_from: tuple[str, ...] = ()


def read_index_json(path: PathLike) -> dict[str, Any]:
    """The parsed index document, read once per (path, mtime, size)."""
    path = as_location(path)
    st = path.stat()
    return _cached_index(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=32)
def _cached_index(path: Location, mtime_ns: int, size: int) -> dict[str, Any]:
    if size > MAX_INDEX_BYTES:
        raise CorruptCheckpointError(
            path, f"an index under {MAX_INDEX_BYTES >> 20} MiB", f"{size} bytes"
        )
    try:
        doc = json_document(path)  # parsed once (the security gate reads it too): not modified
    except (ValueError, RecursionError) as e:
        raise CorruptCheckpointError(path, "a JSON index", f"invalid JSON ({e})") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("weight_map"), dict):
        raise CorruptCheckpointError(
            path,
            "an index object with a 'weight_map' mapping",
            f"keys {sorted(doc)[:5]}" if isinstance(doc, dict) else type(doc).__name__,
        )
    if not set(map(type, doc["weight_map"].values())) <= {str}:  # json makes no str subclass
        raise CorruptCheckpointError(path, "weight_map values that are file names", "other values")
    metadata = doc.get("metadata", {})
    if not isinstance(metadata, dict):
        raise CorruptCheckpointError(path, "'metadata' as an object", type(metadata).__name__)
    return doc


def find_index(folder: PathLike) -> list[Location]:
    """Index files directly in ``folder`` (ColossalAI's ``*.index.*json`` rule), best first."""
    found = [
        p for p in as_location(folder).iterdir() if INDEX_NAME.fullmatch(p.name) and p.is_file()
    ]
    return sorted(found, key=lambda p: ("safetensors" not in p.name, p.name))


def rebuild_from_tmp(folder: Location) -> IndexDoc | None:
    """Merge ``tmp_index_files/*.json`` as ColossalAI's pipeline save would have."""
    tmp = folder / TMP_DIR
    if not tmp.is_dir():
        return None
    names = [p.name for p in tmp.iterdir() if p.name.endswith(".json")]
    if not names:
        return None
    weight_map: dict[str, str] = {}
    total = 0.0
    param_groups = None
    for name in names:
        doc = read_index_json(tmp / name)
        weight_map.update(doc["weight_map"])
        meta = doc.get("metadata", {})
        total += float(meta.get("total_size", 0) or 0)
        param_groups = meta.get("param_groups", param_groups)
    metadata: dict[str, Any] = {"total_size": total}
    if param_groups is not None:
        metadata["param_groups"] = param_groups
    return IndexDoc(tmp, folder, weight_map, metadata, tuple(sorted(names)))


def load_index(path: PathLike) -> IndexDoc:
    """The index of a folder or an index file (rebuilt from tmp files if interrupted)."""
    path = as_location(path)
    if path.is_file():
        doc = read_index_json(path)
        return IndexDoc(path, path.parent, dict(doc["weight_map"]), dict(doc.get("metadata", {})))
    indexes = find_index(path)
    if indexes:
        return load_index(indexes[0])
    rebuilt = rebuild_from_tmp(path)
    if rebuilt is None:
        raise FormatDetectionError(path, "an index JSON or tmp_index_files/", "neither")
    return rebuilt


def classify_index(doc: IndexDoc) -> tuple[str, str, list[str], str]:
    """(family, kind, evidence, detail) for an index."""
    name = doc.source.name
    files = list(dict.fromkeys(doc.weight_map.values()))
    evidence: list[str] = []
    detail = ""
    if doc.rebuilt_from:
        evidence.append(
            f"no final index but {TMP_DIR}/ holds {len(doc.rebuilt_from)} stage index(es) "
            "→ interrupted pipeline save; index rebuilt from them"
        )
        detail = "interrupted pipeline save"
    total = doc.metadata.get("total_size")
    if "param_groups" in doc.metadata:
        evidence.append(f"{name} has metadata.param_groups → ColossalAI sharded optimizer")
        return "colossalai-sharded-optimizer", "optimizer", evidence, detail or "sharded optimizer"
    stages = {m.group(1) for f in files if (m := STAGE_SHARD.search(f))}
    if stages:
        evidence.append(f"shard names carry -stage-SSSSS-shard-NNNNN ({len(stages)} stage(s))")
        detail = detail or f"pipeline save, {len(stages)} stage(s)"
    if files and all(HF_SHARD.search(f) for f in files):
        evidence.append(f"{name} names -of-N shards ({files[0]})")
        if isinstance(total, int) and not isinstance(total, bool):
            evidence.append("total_size is an integer byte count → HF sharded checkpoint")
        return "hf-sharded", "model", evidence, detail
    if isinstance(total, float) or stages or all(COLOSSAL_SHARD.search(f) for f in files):
        unit = "a float (MiB, ColossalAI convention)" if isinstance(total, float) else repr(total)
        evidence.append(
            f"shard names without -of-N ({files[0] if files else 'none'}); total_size {unit}"
        )
        evidence.append("→ ColossalAI sharded model")
        return "colossalai-sharded-model", "model", evidence, detail
    evidence.append(f"{name} has a weight_map over {len(files)} file(s) → sharded model")
    return "hf-sharded", "model", evidence, detail


def probe_dir(path: Location) -> Detection | None:
    if not find_index(path) and not (path / TMP_DIR).is_dir():
        return None
    try:
        doc = load_index(path)
    except FormatDetectionError:
        return None
    family, kind, evidence, detail = classify_index(doc)
    others = [p.name for p in find_index(path)[1:]]
    if others:
        evidence.append(f"also found {', '.join(others)}; using {doc.source.name}")
    return Detection(str(path), family, kind, tuple(evidence), detail)


def probe_file(path: Location) -> Detection | None:
    with path.open("rb") as f:
        head = f.read(64).lstrip()
    if not head.startswith(b"{"):
        return None
    try:
        doc = load_index(path)
    except CorruptCheckpointError:
        if INDEX_NAME.fullmatch(path.name):
            raise
        return None
    family, kind, evidence, detail = classify_index(doc)
    return Detection(str(path), family, kind, tuple(evidence), detail)


def open_sharded(path: Location, detection: Detection) -> CheckpointView:
    """Open every shard the index names (headers / pickle structure only)."""
    from ..weights_file import open_file_records  # late: weights_file imports the file readers

    doc = load_index(path)
    shards: dict[str, RecordTable] = {}  # the shards in the index's order
    values: dict[str, Any] = {"index.metadata": doc.metadata}
    file_infos = [FileInfo(_rel(doc.source, doc.root), doc.source.stat().st_size)]
    optimizer_kind = detection.kind == "optimizer"
    for rel in dict.fromkeys(doc.weight_map.values()):
        shard = _named_file(doc, rel, "shard", "copy the missing shard or re-save")
        shard_records, shard_values = open_file_records(shard, rel, optimizer_shard=optimizer_kind)
        shards[rel] = RecordTable.from_records(shard_records)
        file_infos.append(FileInfo(rel, shard.stat().st_size))
        values.update(shard_values)
    optimizer = None
    warnings: list[str] = []
    if optimizer_kind:
        records = _joined(list(shards.values()))
        group_name = doc.metadata.get("param_groups")
        groups = None
        if isinstance(group_name, str):
            group_path = _named_file(
                doc, group_name, "param-group file", "copy it beside the index"
            )
            _, group_values = open_file_records(group_path, group_name)
            groups = group_values.get("param_groups")
            file_infos.insert(1, FileInfo(group_name, group_path.stat().st_size))
        values["param_groups"] = groups
        optimizer = optimizer_info_from_tree(records, values, groups)
    else:
        records, warnings = _model_records(shards, doc.weight_map)
    return CheckpointView(
        path,
        detection,
        tuple(file_infos),
        records,
        values,
        optimizer=optimizer,
        warnings=tuple(warnings),
    )


def _joined(tables: list[RecordTable]) -> RecordTable:
    return RecordTable.concat(tables) if tables else RecordTable.from_records(())


def _model_records(
    shards: dict[str, RecordTable], weight_map: dict[str, str]
) -> tuple[RecordTable, list[str]]:
    """The shards' records in the index's order, each only from the shard the index names
    for it; warnings for tensors the index does not name there and for names it lists that
    no shard holds."""
    joined = _joined(list(shards.values()))
    if all(_stage_of(rel) == (0, 0) for rel in shards):
        found = _as_indexed(joined, shards, weight_map)
        if found is not None:
            return found, []
    warnings: list[str] = []
    tables = []
    for rel, table in shards.items():
        names = table.column("name")
        if not all(map(operator.eq, repeat(rel), map(weight_map.get, names))):
            keep = [i for i, n in enumerate(names) if weight_map.get(n) == rel]
            warnings.append(
                f"{rel} holds {len(names) - len(keep)} tensor(s) the index does not name"
            )
            table = table.take(keep)
        tables.append(table)
    records = _index_order(_joined(tables), weight_map)
    if len(records) != len(weight_map):
        listed = set(records.column("name"))
        missing = [k for k in weight_map if k not in listed]
        if missing:
            warnings.append(
                f"{len(missing)} name(s) in the index are not in their shard, e.g. {missing[0]}"
            )
    return records, warnings


def _as_indexed(
    joined: RecordTable, shards: dict[str, RecordTable], weight_map: dict[str, str]
) -> RecordTable | None:
    """``joined`` (the shards' records one after the other) in the index's order when the
    shards hold exactly the index's tensors, each in the shard it names (the common case:
    one small dict of names per shard, one lookup per index entry); else None.

    Each index entry finds its record in the shard it names; the entries are distinct and as
    many as the records, the names in a shard distinct, so that is every record once."""
    if len(joined) != len(weight_map):
        return None
    at: dict[str, dict[str, int]] = {}
    start = 0
    for rel, table in shards.items():
        names = table.column("name")
        at[rel] = dict(zip(names, range(start, start + len(names)), strict=True))
        if len(at[rel]) != len(names):
            return None  # a name twice in one shard
        start += len(names)
    try:
        order = list(map(operator.getitem, map(at.__getitem__, weight_map.values()), weight_map))
    except KeyError:  # an entry whose shard does not hold it
        return None
    return joined if order == list(range(len(order))) else joined.take(order)


def _index_order(records: RecordTable, weight_map: dict[str, str]) -> RecordTable:
    """Records in the index's order. A pipeline save merges the stages' indexes in whatever
    order the stage files were listed: the parameter order is stage by stage, each stage's own
    order within."""
    names = records.column("name")
    n = len(names)
    stages = {rel: _stage_of(rel) for rel in set(weight_map.values())}
    if set(stages.values()) <= {(0, 0)}:  # one stage: the index order alone
        at = dict(zip(names, range(n), strict=True))
        if len(at) == n:  # names unique: the index's order, then the rest
            order = cast(list[int], list(filter(_NOT_NONE, map(at.get, weight_map))))
            if len(order) < n:
                order += [i for i, name in enumerate(names) if name not in weight_map]
            return records if order == list(range(n)) else records.take(order)
    position = {name: i for i, name in enumerate(weight_map)}
    key: list[Any] = [position.get(name, len(position)) for name in names]
    if not set(stages.values()) <= {(0, 0)}:
        key = [
            (stages.get(weight_map.get(name, ""), (0, 0)), k)
            for name, k in zip(names, key, strict=True)
        ]
    return records.take(sorted(range(n), key=key.__getitem__))


_NOT_NONE = functools.partial(operator.is_not, None)


def _stage_of(file: str) -> tuple[int, int]:
    """(pipeline stage, expert rank) of a ``-stage-SSSSS[-EEEEE]-shard-`` file; (0, 0) else."""
    m = STAGE_SHARD.search(file)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else (0, 0)


def _named_file(doc: IndexDoc, name: str, what: str, todo: str) -> Location:
    """The file ``name`` from the index, inside the checkpoint and present."""
    path = resolve_inside(doc.root, name, doc.source)
    if not path.is_file():
        raise CorruptCheckpointError(
            doc.source,
            f"{what} {name} named by the index",
            "no such file",
            f"The checkpoint is incomplete; {todo}.",
        )
    return path


def _rel(p: Location, root: Location) -> str:
    try:
        return p.relative_to(root).as_posix()
    except ValueError:
        return p.name
