"""Index and file integrity: named files exist, no orphans, total_size, shards, truncation.

Works from the files themselves (index JSON, headers, pickle structure), so it also reports
checkpoints that :func:`open_checkpoint` refuses because a shard is missing or truncated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ..errors import CkptExplorerError, TruncatedFileError, UnsafeCheckpointError
from ..io.location import Location, PathLike, as_location
from ..io.paths import resolve_inside
from ..io.torch_file import NotACheckpointError
from ..readers.hf.sharded_index import INDEX_NAME, STAGE_SHARD, TMP_DIR, find_index
from ..readers.weights_file import open_file_records
from ..types import TensorRecord
from .findings import Finding
from .integrity_columns import all_in_place, counted_bytes, index_without_duplicates

MIB = 2**20
SINGLE_FILES = ("model.safetensors", "pytorch_model.bin")


def _one_per_stage(files: list[str]) -> bool:
    """Every file a different pipeline stage's shard (``-stage-SSSSS-...-shard-``)."""
    stages = [m.group(1) if (m := STAGE_SHARD.search(f)) else None for f in files]
    return None not in stages and len(set(stages)) == len(stages)


def _duplicates_hook(found: list[str]) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                found.append(k)
            out[k] = v
        return out

    return hook


def _parse_index(path: Location, label: str) -> tuple[dict[str, Any] | None, list[Finding]]:
    known = index_without_duplicates(path)  # the listing's parse, when no key repeats
    if known is not None and isinstance(known.get("weight_map"), dict):
        return known, []
    dups: list[str] = []
    try:
        doc = json.loads(
            path.read_bytes().decode("utf-8"), object_pairs_hook=_duplicates_hook(dups)
        )
    except (ValueError, OSError, RecursionError) as e:
        return None, [
            Finding(
                "integrity.bad_index",
                "error",
                f"{path.name} is not valid JSON ({e})",
                "Re-save the checkpoint; the index cannot be read.",
                file=label + path.name,
            )
        ]
    if not isinstance(doc, dict) or not isinstance(doc.get("weight_map"), dict):
        return None, [
            Finding(
                "integrity.bad_index",
                "error",
                f"{path.name} has no weight_map object",
                "Re-save the checkpoint.",
                file=label + path.name,
            )
        ]
    findings = [
        Finding(
            "integrity.duplicate_entry",
            "warning",
            f"{name!r} is listed twice in {path.name}; the last entry wins",
            "Remove the duplicate entry so every loader reads the same shard.",
            tensor=label + name,
            file=label + path.name,
        )
        for name in dict.fromkeys(dups)
        if name not in ("weight_map", "metadata")
    ]
    return doc, findings


def _file_records(
    path: Location, rel: str, optimizer: bool, label: str
) -> tuple[Sequence[TensorRecord] | None, list[Finding]]:
    try:
        records, _ = open_file_records(path, rel, optimizer_shard=optimizer)
    except TruncatedFileError as e:
        return None, [
            Finding(
                "integrity.truncated",
                "error",
                f"{rel} is truncated: expected {e.expected}, found {e.found}",
                "Copy the file again from its source (or wait for an async save to finish).",
                file=label + rel,
            )
        ]
    except NotACheckpointError:
        return None, []  # not a checkpoint: the opener says what it is, in one line
    except (CkptExplorerError, OSError) as e:
        return None, [
            Finding(
                "integrity.unreadable_file",
                "error",
                f"{rel} cannot be read: {e}",
                "Copy the file again or re-save the checkpoint.",
                file=label + rel,
            )
        ]
    return records, []


def check_file(path: PathLike, label: str = "") -> list[Finding]:
    """A single weights file: readable to the end its header or pickle declares."""
    path = as_location(path)
    from ..io.torch_file import sniff_torch
    from ..readers.safetensors_file import looks_like_safetensors

    with path.open("rb") as f:
        head = f.read(16)
    if not looks_like_safetensors(head) and sniff_torch(head) is None:
        return []
    _, findings = _file_records(path, path.name, False, label)
    return findings


def _unique_bytes(records: Sequence[TensorRecord]) -> int:
    seen: set[tuple[str | None, str, int | None]] = set()
    total = 0
    for r in records:
        if r.storage_key is not None:
            key = (r.storage_key, r.file, r.offset)
            if key in seen:
                continue
            seen.add(key)
        total += r.nbytes
    return total


def _total_size(
    total: Any, counted: list[int], index_name: str, label: str, hf_named: bool
) -> list[Finding]:
    rule, where = "integrity.total_size", label + index_name
    if total is None:
        return []
    if isinstance(total, bool) or not isinstance(total, int | float):
        return [Finding(rule, "warning", f"total_size is {total!r}, not a number", file=where)]
    as_bytes = any(abs(total - b) <= max(1.0, 1e-3 * b) for b in counted)
    as_mib = any(abs(total - b / MIB) <= max(1e-6, 1e-3 * b / MIB) for b in counted)
    kind = "an integer" if isinstance(total, int) else "a float"
    if as_bytes and (isinstance(total, int) or not as_mib):
        convention = "bytes (HF convention)"
    elif as_mib:
        convention = "MiB (ColossalAI convention)"
    else:
        claimed_bytes = total if (isinstance(total, int) or hf_named) else total * MIB
        more = claimed_bytes > max(counted)
        return [
            Finding(
                rule,
                "error" if more else "warning",
                f"total_size {total} matches neither the {counted[0]} bytes (HF convention) "
                f"nor the {counted[0] / MIB:.4f} MiB (ColossalAI convention) of the tensors the "
                "index names" + (" — the index claims more than is there" if more else ""),
                "Tensors may be missing, or the index comes from another save; re-save, or "
                "recompute total_size.",
                file=where,
            )
        ]
    return [
        Finding(
            "integrity.total_size_convention",
            "info",
            f"total_size {total} is {kind} in {convention} and matches the tensors",
            file=where,
        )
    ]


def _orphans(folder: Location, index_name: str, named: set[str], label: str) -> list[Finding]:
    m = INDEX_NAME.fullmatch(index_name)
    if m is None:
        return []
    stem, prefix = m.group(1), m.group(2) or ""
    base, dot, ext = stem.rpartition(".")
    if not dot:
        base, ext = stem, ""
    pattern = re.compile(
        re.escape(base + prefix)
        + r"-(\d{5}(-of-\d{5})?|stage-\d{5}(-\d{5})?-shard-\d{5})"
        + re.escape("." + ext)
        + "$"
    )
    findings = []
    for p in sorted(folder.iterdir()):
        if p.is_file() and p.name not in named and pattern.match(p.name):
            findings.append(
                Finding(
                    "integrity.orphan_shard",
                    "warning",
                    f"{p.name} lies beside {index_name} but the index does not name it",
                    "A stale shard from an earlier save; delete it before publishing.",
                    file=label + p.name,
                )
            )
    for single in SINGLE_FILES:
        if (folder / single).is_file() and single not in named:
            findings.append(
                Finding(
                    "integrity.shadowing_file",
                    "warning",
                    f"{single} lies beside {index_name}; from_pretrained loads it and ignores "
                    "the index",
                    "Delete whichever of the two is stale.",
                    file=label + single,
                )
            )
    return findings


def _tmp_index(folder: Location, has_final: bool, label: str) -> list[Finding]:
    tmp = folder / TMP_DIR
    if not tmp.is_dir():
        return []
    stage_files = sorted(p.name for p in tmp.iterdir() if p.name.endswith(".json"))
    stages_indexed = {m.group(1) for n in stage_files if (m := re.search(r"-stage-(\d{5})", n))}
    stages_on_disk = {m.group(1) for p in folder.iterdir() if (m := STAGE_SHARD.search(p.name))}
    missing = sorted(stages_on_disk - stages_indexed)
    extra = f"; shards of stage(s) {', '.join(missing)} have no stage index" if missing else ""
    if has_final:
        return [
            Finding(
                "integrity.tmp_index_files",
                "warning",
                f"{TMP_DIR}/ ({len(stage_files)} stage index(es)) is still here beside the final "
                "index: the save stopped before its cleanup" + extra,
                f"Check that the final index names every stage's shards, then delete {TMP_DIR}/.",
                file=label + TMP_DIR,
            )
        ]
    return [
        Finding(
            "integrity.interrupted_save",
            "error",
            f"no final index, only {TMP_DIR}/ with {len(stage_files)} stage index(es): the "
            "pipeline save was interrupted before rank 0 merged them" + extra,
            "Re-save, or write the merged index (ckpt_explorer reads it merged from the stage "
            "indexes) before loading with ColossalAI or transformers.",
            file=label + TMP_DIR,
        )
    ]


def check_index(index: PathLike | None, folder: PathLike, label: str = "") -> list[Finding]:
    """Every rule about one index (or, with ``index`` None, an interrupted save's tmp files)."""
    index = as_location(index) if index is not None else None
    folder = as_location(folder)
    findings = _tmp_index(folder, index is not None, label)
    if index is None:
        tmp = folder / TMP_DIR
        docs = [(p, *_parse_index(p, label + TMP_DIR + "/")) for p in sorted(tmp.glob("*.json"))]
        merged: dict[str, Any] = {"weight_map": {}, "metadata": {}}
        for _, doc, errs in docs:
            findings += errs
            if doc:
                merged["weight_map"].update(doc["weight_map"])
        return findings + _check_doc(merged, folder, folder / TMP_DIR, label, check_total=False)
    doc, errs = _parse_index(index, label)
    findings += errs
    if doc is None:
        return findings
    return findings + _check_doc(doc, folder, index, label)


def _check_doc(
    doc: dict[str, Any], folder: Location, source: Location, label: str, check_total: bool = True
) -> list[Finding]:
    findings: list[Finding] = []
    weight_map: dict[str, str] = doc["weight_map"]
    if not set(map(type, weight_map.values())) <= {str}:
        weight_map = {k: v for k, v in weight_map.items() if isinstance(v, str)}
    raw_meta = doc.get("metadata")
    metadata: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    optimizer = "param_groups" in metadata
    by_file: dict[str, None] = dict.fromkeys(weight_map.values())  # the files, in index order
    named = set(by_file)
    group_file = metadata.get("param_groups")
    if isinstance(group_file, str):
        named.add(group_file)
        by_file.setdefault(group_file)
    contents: dict[str, Sequence[TensorRecord]] = {}
    for rel in by_file:
        try:
            path = resolve_inside(folder, rel, source)
        except UnsafeCheckpointError as e:
            findings.append(
                Finding("integrity.unsafe_name", "error", e.one_line(), file=label + rel)
            )
            continue
        if not path.is_file():
            names = [name for name, file in weight_map.items() if file == rel]
            what = "param-group file" if rel == group_file else f"shard with {len(names)} entries"
            first = f", e.g. {names[0]}" if names else ""
            findings.append(
                Finding(
                    "integrity.missing_file",
                    "error",
                    f"{rel} ({what}{first}) is named by {source.name} but does not exist",
                    "The checkpoint is incomplete: copy the missing file or re-save.",
                    tensor=label + names[0] if names and not optimizer else None,
                    file=label + rel,
                )
            )
            continue
        records, errs = _file_records(path, rel, optimizer and rel != group_file, label)
        findings += errs
        if records is not None and rel != group_file:
            contents[rel] = records
    findings += _placement(weight_map, contents, optimizer, label)
    if check_total and contents and len(contents) == len(by_file) - (1 if group_file else 0):
        counted = None if optimizer else counted_bytes(weight_map, contents)
        if counted is None:
            listed = [
                r
                for rel, recs in contents.items()
                for r in recs
                if _key(r.name, optimizer) in weight_map
            ]
            every = [r for recs in contents.values() for r in recs]
            counted = [_unique_bytes(listed), sum(r.nbytes for r in listed), _unique_bytes(every)]
        hf_named = bool(re.search(r"-\d{5}-of-\d{5}\.", " ".join(by_file)))
        findings += _total_size(metadata.get("total_size"), counted, source.name, label, hf_named)
    if source.is_file():
        findings += _orphans(folder, source.name, named, label)
    return findings


def _key(name: str, optimizer: bool) -> str:
    if optimizer:
        parts = name.split(".")
        return parts[1] if len(parts) >= 3 and parts[0] == "state" else name
    return name


def _placement(
    weight_map: dict[str, str],
    contents: dict[str, Sequence[TensorRecord]],
    optimizer: bool,
    label: str,
) -> list[Finding]:
    if not optimizer and all_in_place(weight_map, contents):  # the common case first
        return []
    where: dict[str, list[str]] = {}
    for rel, records in contents.items():
        for key in dict.fromkeys(_key(r.name, optimizer) for r in records):
            where.setdefault(key, []).append(rel)
    what = "param id" if optimizer else "tensor"
    findings = []
    for name, rel in weight_map.items():
        if rel not in contents:
            continue
        found = where.get(name, [])
        pid = int(name) if optimizer and name.isdigit() else None
        tensor = None if optimizer else label + name
        if rel in found:
            continue
        if found:
            findings.append(
                Finding(
                    "integrity.wrong_shard",
                    "error",
                    f"{what} {name} is indexed in {rel} but found in {', '.join(found)}",
                    "Loaders read the shard the index names and will not find it; fix the "
                    "weight_map entry or re-save.",
                    tensor=tensor,
                    file=label + rel,
                    param_id=pid,
                )
            )
        else:
            findings.append(
                Finding(
                    "integrity.missing_tensor",
                    "error",
                    f"{what} {name} is indexed in {rel} but no shard holds it",
                    "The shard is from another save or was rewritten; re-save the checkpoint.",
                    tensor=tensor,
                    file=label + rel,
                    param_id=pid,
                )
            )
    for key, files in where.items():
        if key in weight_map and len(files) > 1 and _one_per_stage(files):
            findings.append(
                Finding(
                    "integrity.duplicate_tensor",
                    "info",
                    f"{what} {key} is stored by each of {len(files)} pipeline stages "
                    f"({', '.join(files)}); the index uses {weight_map[key]}",
                    "A module every stage holds (rotary inv_freq, a shared buffer); loaders "
                    "read the indexed copy.",
                    tensor=None if optimizer else label + key,
                    file=label + weight_map[key],
                )
            )
        elif key in weight_map and len(files) > 1:
            findings.append(
                Finding(
                    "integrity.duplicate_tensor",
                    "warning",
                    f"{what} {key} is stored in {len(files)} shards ({', '.join(files)}); the "
                    f"index uses {weight_map[key]}",
                    "Harmless to loaders but wastes space; drop the extra copies.",
                    tensor=None if optimizer else label + key,
                    file=label + weight_map[key],
                    param_id=int(key) if optimizer and key.isdigit() else None,
                )
            )
        elif key not in weight_map and not optimizer:
            findings.append(
                Finding(
                    "integrity.unindexed_tensor",
                    "warning",
                    f"{key} is stored in {', '.join(files)} but the index does not name it",
                    "Loaders ignore it; add it to the weight_map or remove it.",
                    tensor=label + key,
                    file=label + files[0],
                )
            )
    return findings


def check_path(path: PathLike, label: str = "") -> list[Finding]:
    """The integrity rules that apply to ``path`` (a folder with an index, an index, a file)."""
    path = as_location(path)
    if path.is_dir():
        indexes = find_index(path)
        if indexes:
            return check_index(indexes[0], path, label)
        if (path / TMP_DIR).is_dir():
            return check_index(None, path, label)
        return []
    if path.is_file() and INDEX_NAME.fullmatch(path.name):
        return check_index(path, path.parent, label)
    if path.is_file():
        return check_file(path, label)
    return []
