"""GGUF files (llama.cpp, Ollama, LM Studio): one file or a split set, listed from headers.

A GGUF file is told by content (the ``GGUF`` magic and a header that parses,
:mod:`...io.gguf_header`). Its records are the tensor infos: the name as written
(``blk.0.attn_q.weight``), the shape outermost first (as HF and torch write it; GGUF stores
the innermost dimension first), the ggml type (a plain type shows as its torch dtype, a
quantized one as ``q8_0``, ``q4_k`` ...), the offset and bytes. The key/values are the view's
values under ``__metadata__.`` (long arrays such as the tokenizer's tokens summarised).

A split set (``gguf-split``: ``<name>-00001-of-00003.gguf`` ...) is one model: every split
names its number and the count (``split.no``, ``split.count``), and llama.cpp finds the
others by that name pattern, as :func:`split_files` does here. Opening any split opens all.
"""

from __future__ import annotations

import functools
from typing import Any

from ...errors import CorruptCheckpointError
from ...io.gguf_header import (
    SPLIT_NAME,
    ArraySummary,
    GGUFError,
    GGUFHeader,
    byteorder_of,
    parse,
    split_names,
)
from ...io.location import Location
from ...io.mapped import MappedFile
from ...types import Detection, FileInfo, TensorRecord, Traits
from ...view import CheckpointView
from .runtimes import RUNTIMES_KEY, header_notes, runtime_evidence
from .values import record_dtype, tensor_read_values

TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.huggingface.json")
CHAT_TEMPLATE = "tokenizer.chat_template"


@functools.lru_cache(maxsize=64)
def _cached_header(path: Location, mtime_ns: int, size: int) -> GGUFHeader:
    try:
        return parse(path.read_range, size)
    except GGUFError as e:
        raise CorruptCheckpointError(
            path, "a well-formed GGUF header", str(e), "The file is damaged or truncated."
        ) from e


def gguf_header(path: Location) -> GGUFHeader:
    """The checked header of the GGUF file ``path`` (cached by size and mtime)."""
    st = path.stat()
    return _cached_header(path, st.st_mtime_ns, st.st_size)


def is_gguf_file(path: Location) -> bool:
    if not path.is_file():
        return False
    return byteorder_of(path.read_range(0, 8)) is not None


def split_of(header: GGUFHeader) -> tuple[int, int]:
    """(0-based split number, split count); (0, 1) for a file that is not split."""
    count = header.metadata.get("split.count", 1)
    no = header.metadata.get("split.no", 0)
    if not isinstance(count, int) or not isinstance(no, int) or count < 1:
        return 0, 1
    return no, count


def split_files(path: Location, header: GGUFHeader) -> list[Location]:
    """Every split of the set ``path`` belongs to, in order (``[path]`` when not split).

    Raises:
        CorruptCheckpointError: a split is missing, or names another number or count.
    """
    no, count = split_of(header)
    if count == 1:
        return [path]
    m = SPLIT_NAME.match(path.name)
    if m is None:
        raise CorruptCheckpointError(
            path,
            f"a split named <name>-{no + 1:05d}-of-{count:05d}.gguf (split {no + 1} of {count})",
            f"the name {path.name!r}",
            "llama.cpp finds the other splits by that name; rename it back.",
        )
    out = []
    for i in range(count):
        other = path.parent / f"{m['prefix']}-{i + 1:05d}-of-{count:05d}.gguf"
        if not other.is_file():
            raise CorruptCheckpointError(
                path, f"split {i + 1} of {count} ({other.name})", "no such file", "Copy it too."
            )
        if split_of(gguf_header(other)) != (i, count):
            raise CorruptCheckpointError(
                other, f"split.no {i} of split.count {count}", str(split_of(gguf_header(other)))
            )
        out.append(other)
    return out


def describe(header: GGUFHeader) -> list[str]:
    """What a person wants first: architecture, tokenizer, chat template, types."""
    md = header.metadata
    out = []
    if header.architecture:
        out.append(f"general.architecture = {header.architecture}")
    tokens = md.get("tokenizer.ggml.tokens")
    model = md.get("tokenizer.ggml.model")
    if isinstance(tokens, ArraySummary) or model is not None:
        n = f", {tokens.count} tokens" if isinstance(tokens, ArraySummary) else ""
        out.append(f"tokenizer {model or '(model not named)'}{n}")
    if CHAT_TEMPLATE in md:
        out.append("a chat template")
    types: dict[str, int] = {}
    for t in header.tensors:
        types[t.type_name] = types.get(t.type_name, 0) + 1
    if types:
        out.append("types " + ", ".join(f"{k} x{v}" for k, v in types.items()))
    return out


def probe(path: Location) -> Detection | None:
    if not is_gguf_file(path):
        return None
    header = gguf_header(path)
    evidence = [
        f"GGUF magic, version {header.version} ({header.byteorder}-endian), "
        f"{len(header.tensors)} tensors, {len(header.metadata)} key/values",
        *describe(header),
        runtime_evidence(header_notes(header)),
    ]
    no, count = split_of(header)
    detail = f"split {no + 1} of {count}" if count > 1 else ""
    if count > 1:
        evidence.append(f"split.no {no} of split.count {count} → one split of a gguf-split set")
    return Detection(
        str(path), "gguf", "model", tuple(evidence), detail, Traits(loaded_by="llama.cpp")
    )


def plain_value(value: Any) -> Any:
    """A metadata value as a plain JSON value (a long array as its summary text)."""
    if isinstance(value, ArraySummary):
        return list(value.head) if value.complete else str(value)
    return value


def gguf_records(files: list[Location], root: Location) -> list[TensorRecord]:
    """The records of every split, in file then data order (``file`` relative to ``root``)."""
    records = []
    for path in files:
        header = gguf_header(path)
        mapped = MappedFile(path)
        rel = path.name if path.parent == root else str(path.relative_to(root))
        for info in sorted(header.tensors, key=lambda t: t.offset):
            records.append(
                TensorRecord(
                    info.name,
                    record_dtype(info),
                    info.shape,
                    info.nbytes,
                    rel,
                    header.data_start + info.offset,
                    read_values=tensor_read_values(
                        mapped, info, header.data_start, header.byteorder
                    ),
                )
            )
    return records


def open_gguf(path: Location, detection: Detection) -> CheckpointView:
    first = gguf_header(path)
    files = split_files(path, first)
    headers = [gguf_header(f) for f in files]
    values: dict[str, Any] = {}
    for h in headers:  # the first split holds the model's keys; every split its split.*
        for k, v in h.metadata.items():
            values.setdefault(f"__metadata__.{k}", plain_value(v))
    values[RUNTIMES_KEY] = header_notes(first)
    records = gguf_records(files, path.parent)
    infos = tuple(FileInfo(f.name, h.file_size) for f, h in zip(files, headers, strict=True))
    return CheckpointView(path, detection, infos, tuple(records), values)


def folder_set(path: Location) -> Location | None:
    """The first file of the one GGUF export in folder ``path`` (one file, or one split set),
    None when it holds none or several (a folder of several quantizations: the user picks)."""
    sets: set[str] = set()
    first: dict[str, Location] = {}
    for child in path.iterdir():
        if not child.name.endswith(".gguf") or not child.is_file():
            continue
        names = split_names(child.name) or [child.name]
        sets.add(names[0])
        if child.name == names[0]:
            first[names[0]] = child
    if len(sets) != 1:
        return None
    (name,) = sets
    found = first.get(name)
    return found if found is not None and is_gguf_file(found) else None


def probe_folder(path: Location) -> Detection | None:
    """A folder holding one GGUF export (a Hub download of one quantization, beside its
    README): detected as that file is."""
    found = folder_set(path)
    if found is None:
        return None
    detection = probe(found)
    if detection is None:
        return None
    evidence = (f"the folder's one GGUF export: {found.name}", *detection.evidence)
    return Detection(str(path), "gguf", "model", evidence, detection.detail, detection.traits)


def open_gguf_folder(path: Location, detection: Detection) -> CheckpointView:
    """The folder's one GGUF export, opened as its first file is."""
    found = folder_set(path)
    if found is None:
        raise CorruptCheckpointError(
            path, "one GGUF export (a file or one split set)", "none, or several", "Point at one."
        )
    return open_gguf(found, detection)
