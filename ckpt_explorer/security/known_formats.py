"""The formats the gate proves to be data: parsed completely, and read by no consumer that runs
code from them.

A file in which no loader finds a pickle is ``data`` only when :func:`place` recognises it
here: a safetensors file whose header the listing's own checks accept, a numeric ``.npy``, a
zip (``.npz``) or tar whose every member is data, a compressed stream of data, JSON, UTF-8
text (configs, vocabularies, merges, chat templates, tiktoken ranks, YAML without Python
tags), a sentencepiece model (protobuf ``ModelProto``), GGUF, PNG / JPEG / GIF / WebP / BMP
images, and the files of a cloned repository's ``.git`` store (read by git alone). Anything
else is not placed, and the caller calls it ``unverified``.

A YAML that asks for Python objects (``!!python/object``, ``/name``, ``/module``, ``/apply``)
is code: ``yaml.unsafe_load`` and ``yaml.load(Loader=yaml.Loader)`` (mmengine's YAML
handler) import and call what it names, ``yaml.full_load`` (Lightning's ``hparams.yaml``)
resolves ``python/name``; only the safe loaders (OmegaConf, Hydra) refuse it.
"""

from __future__ import annotations

import bz2
import codecs
import functools
import gzip
import io
import json
import lzma
import re
import struct
import tarfile
import warnings
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any

from ..io.gguf_header import GGUFError, byteorder_of, parse_buffer
from .hdf5_walk import HDF5_MAGIC
from .hydra_targets import target_code
from .keras_files import hdf5_file, is_keras_zip, keras_json, keras_zip
from .onnx_model import OnnxError, parse_model
from .onnx_model import doubts as onnx_doubts
from .protobuf_wire import fields
from .zip_check import BufferFile

MAX_PARSE = 256 * 2**20  # bytes of archive members placed, in all
MAX_MEMBER = 64 * 2**20  # a file, member or stream parsed whole (larger text is streamed)
MAX_YAML = 2**20  # composed as YAML; larger texts are searched for python tags
MAX_DEPTH = 4
_PYTHON_TAG = "tag:yaml.org,2002:python/"
# python/ tags that make plain values under every loader that knows them
_VALUE_TAGS = frozenset(
    {"none", "bool", "str", "unicode", "bytes", "int", "long", "float", "complex", "list"}
    | {"tuple", "dict"}
)
_CONTROL = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f]")
_NPY = b"\x93NUMPY"
PROVEN = (
    "safetensors, numeric .npy / .npz, JSON, YAML without Python tags, UTF-8 text, "
    "a sentencepiece model, GGUF, TFRecord (TensorBoard events), PNG / JPEG / GIF / WebP / BMP"
)


@dataclass
class Placed:
    """What the bytes are (``format``), or why they are not data (``doubt``, ``code``)."""

    format: str = ""
    doubt: str = ""
    code: list[str] = field(default_factory=list)
    unsafe: list[str] = field(default_factory=list)  # code a plain load runs (Keras configs)


def place(
    buf: Any,
    size: int,
    formats: list[str],
    label: str = "",
    json_text: bool = False,
    local: str | None = None,
) -> Placed:
    """Place ``buf[:size]``, a file in which no loader finds a pickle; ``formats`` are what
    the views recognised in it (the first is the file's own); ``json_text``: the file is
    already known to be JSON text (parsed once for the listing); ``local``: the file's path
    on this machine (HDF5 is walked from it)."""
    top = formats[0] if formats else ""
    depth = 0
    try:
        if json_text and not top:
            if size > MAX_MEMBER and _find(buf, b'"class_name"', 0, size) >= 0:
                return _not(
                    f"a JSON over {MAX_MEMBER >> 20} MiB naming class_name (a Keras config?)"
                )
            return _json(bytes(buf[:size]) if size <= MAX_MEMBER else b"")
        if top == "safetensors":
            return _safetensors(buf, size, label)
        if top == "npy":
            return _npy(buf, size)
        if top in ("npz", "zip archive"):
            return _zip(buf, size, top, depth)
        if top == "tar archive":
            return _tar(buf, size, depth)
        if top.endswith(" stream"):
            return _compressed(buf, size, top[: -len(" stream")], depth)
        if top:
            named = top if top.startswith(("a ", "an ")) else f"a {top}"
            return _not(f"{named}, which no check here proves to be data")
        return _by_content(buf, size, depth, local)
    except RecursionError:
        return _not("nested too deeply to parse")


def _not(why: str) -> Placed:
    return Placed(doubt=why)


def _by_content(buf: Any, size: int, depth: int, local: str | None = None) -> Placed:
    if size == 0:
        return Placed("empty file")
    head = bytes(buf[: min(size, 64)])
    if head.startswith(HDF5_MAGIC):
        return _hdf5(buf, size, local)
    if head[:1] == b"\x08":  # a protobuf whose first field is a varint 1: ONNX's ir_version
        onnx = _onnx(buf, size)
        if onnx is not None:
            return onnx
    for magic, check in _MAGIC_CHECKS:
        if head.startswith(magic):
            return check(buf, size)
    if head.startswith(_NPY):
        return _npy(buf, size)
    binary = _CONTROL.search(bytes(buf[: min(size, 4096)])) is not None
    if size > MAX_MEMBER:  # larger than any tokenizer model or config parsed whole
        if not binary:
            return _big_text(buf, size)
        return _tfrecord(buf, size) or _not(f"not UTF-8 text{_first_bytes(head)}")
    raw = bytes(buf[:size])
    text = None if binary else _utf8(raw)
    if text is not None:
        stripped = text.lstrip("\ufeff \t\r\n")
        if stripped[:1] in ("{", "[") and _is_json(text):
            return _json(raw)
        return _text(text)
    model = _sentencepiece(raw)
    if model:
        return Placed(model)
    return _tfrecord(buf, size) or _not(f"not UTF-8 text{_first_bytes(head)}")


def _big_text(buf: Any, size: int) -> Placed:
    """UTF-8 text read 1 MiB at a time (its memory bounded), searched for python tags."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    tail = ""
    step = 1 << 20
    for at in range(0, size, step):
        chunk = bytes(buf[at : min(size, at + step)])
        if _CONTROL.search(chunk):
            return _not(f"not UTF-8 text (a control byte after byte {at})")
        try:
            text = decoder.decode(chunk, final=at + step >= size)
        except UnicodeDecodeError:
            return _not(f"not UTF-8 text (invalid UTF-8 after byte {at})")
        tags = _spelled_tags(tail + text)
        if tags:
            return _tagged(sorted(tags))
        tail = text[-64:]
    return Placed("text")


def _first_bytes(head: bytes) -> str:
    return f" (it starts {head[:8].hex(' ')})" if head else ""


# --- text, JSON, YAML -----------------------------------------------------------------------


def _utf8(raw: bytes) -> str | None:
    """The text of UTF-8 bytes without control characters other than whitespace and ESC."""
    if _CONTROL.search(raw):
        return None
    try:
        return codecs.decode(raw, "utf-8")
    except UnicodeDecodeError:
        return None


def _json(raw: bytes) -> Placed:
    """JSON; a Keras config (a model saved as a folder) judged as Keras rebuilds it."""
    judged = keras_json(raw)
    if judged is None:
        return Placed("JSON")
    return Placed(
        "Keras config", doubt="; ".join(judged.doubts), code=judged.code, unsafe=judged.unsafe
    )


def _hdf5(buf: Any, size: int, local: str | None) -> Placed:
    name, judged, doubts = hdf5_file(buf, size, local)
    return Placed(
        name, doubt="; ".join(doubts + judged.doubts), code=judged.code, unsafe=judged.unsafe
    )


def _onnx(buf: Any, size: int) -> Placed | None:
    """An ONNX model (:mod:`.onnx_model`); None when the bytes are not one."""
    try:
        model = parse_model(buf, size)
    except OnnxError:
        return None
    return Placed("ONNX model", doubt="; ".join(onnx_doubts(model)))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _text(text: str) -> Placed:
    """Text; YAML with Python tags or Hydra targets is code."""
    placed = _tagged_text(text)
    if "_target_" in text and len(text) > MAX_YAML:
        placed.doubt = placed.doubt or "a YAML over 1 MiB naming _target_, not composed"
        return placed
    targets = target_code(text) if len(text) <= MAX_YAML else []
    if targets:
        placed.code += [f"a YAML config {t}" for t in targets]
        if placed.format in ("text", "YAML"):
            placed.format = "YAML with Hydra targets"
    return placed


def text_code(raw: bytes) -> list[str]:
    """The code a text file asks for (YAML Python tags, Hydra targets); [] for anything else."""
    text = _utf8(raw)
    return _text(text).code if text is not None else []


def _tagged_text(text: str) -> Placed:
    if "!" not in text and "%" not in text:
        return Placed("text")
    tags = _yaml_tags(text)
    if tags is None:
        return Placed("text")
    objects = sorted(t for t in tags if t.split(":")[0] not in _VALUE_TAGS)
    if not objects:
        return Placed("YAML" if tags else "text")
    return _tagged(objects)


def _tagged(objects: list[str]) -> Placed:
    shown = ", ".join(f"!!python/{t}" for t in objects[:4])
    return Placed(
        "YAML with Python tags",
        code=[
            f"a YAML that asks for Python objects ({shown}): yaml.unsafe_load and yaml.load("
            "Loader=yaml.Loader) (mmengine's YAML handler) import and call them, yaml.full_load "
            "(Lightning's hparams.yaml) resolves python/name; safe loaders (OmegaConf, Hydra) "
            "refuse the file"
        ],
    )


def _yaml_tags(text: str) -> set[str] | None:
    """The ``python/...`` tags of a YAML text (None: none spelled, not YAML).

    Composed (scanned and resolved, nothing constructed) as every PyYAML loader composes it;
    text that does not compose, or a machine without PyYAML, falls back to the spellings."""
    try:
        import yaml
    except ImportError:
        return _spelled_tags(text)
    if len(text) > MAX_YAML:
        return _spelled_tags(text)
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except (yaml.YAMLError, RecursionError, ValueError):
        return _spelled_tags(text)
    found: set[str] = set()
    seen: set[int] = set()
    todo = [n for n in nodes if n is not None]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node.tag, str) and node.tag.startswith(_PYTHON_TAG):
            found.add(node.tag[len(_PYTHON_TAG) :])
        if isinstance(node, yaml.MappingNode):
            todo += [x for pair in node.value for x in pair]
        elif isinstance(node, yaml.SequenceNode):
            todo += node.value
    return found


_SPELLINGS = ("!!python/", "tag:yaml.org,2002:python/", "\n%tag")


def _spelled_tags(text: str) -> set[str] | None:
    """A python tag, or a %TAG directive (which can spell one in two halves), written in a
    text too large or too broken to compose (``%xx`` escapes decoded as PyYAML does)."""
    low = "\n" + text.lower()
    if "%" in low:
        low += "\n" + re.sub(r"%([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), low)
    if any(s in low for s in _SPELLINGS):
        return {"object (a tag the YAML parser could not read)"}
    return None


# --- numpy, safetensors ---------------------------------------------------------------------


def npy_dtype(f: Any) -> Any:
    """The dtype of the ``.npy`` read from ``f`` (left just after its header), by numpy's own
    header reader, which evaluates only a literal; numpy's exception when it refuses it."""
    from numpy.lib import format as npformat

    impl = getattr(npformat, "_read_array_header", None)
    if impl is None:  # numpy 2 keeps it in its private module
        import importlib

        impl = importlib.import_module("numpy.lib._format_impl")._read_array_header
    with warnings.catch_warnings():  # a Python 2 header: numpy warns, and reads it
        warnings.simplefilter("ignore")
        version = npformat.read_magic(f)
        _shape, _fortran, dtype = impl(f, version, max_header_size=1 << 20)
    return dtype


def _npy(buf: Any, size: int) -> Placed:
    try:
        dtype = npy_dtype(io.BufferedReader(BufferFile(buf, 0, size)))
    except Exception:  # numpy's reader refuses it
        return _not("an .npy header numpy does not read")
    if dtype.hasobject:
        return _not("an .npy object array whose pickle does not load")
    return Placed("npy")


def _safetensors(buf: Any, size: int, label: str) -> Placed:
    from ..io.safetensors_header import parse_header

    (n,) = struct.unpack("<Q", bytes(buf[:8]))
    try:
        parse_header(label, bytes(buf[8 : 8 + n]), size)
    except Exception as e:  # any refusal of the listing's checks
        return _not(f"a safetensors header the listing's checks refuse ({e})")
    return Placed("safetensors")


# --- archives and compressed streams --------------------------------------------------------


def _member(data: bytes, depth: int) -> Placed:
    if depth >= MAX_DEPTH:
        return _not("archives nested too deeply")
    return _by_content(data, len(data), depth + 1)


def _zip(buf: Any, size: int, top: str, depth: int) -> Placed:
    try:
        zf = zipfile.ZipFile(io.BufferedReader(BufferFile(buf, 0, size)))
    except (zipfile.BadZipFile, OSError, ValueError):
        return _not("a zip that Python's zipfile does not open")
    numeric = True
    budget = MAX_PARSE
    with zf:
        if is_keras_zip(zf.namelist()):
            return _keras(zf, depth)
        for info in zf.infolist():
            budget -= 0 if info.filename.endswith(".npy") else info.file_size
            if budget < 0:
                return _not(f"members of over {MAX_PARSE >> 20} MiB in all")
            try:
                with zf.open(info) as f:
                    if info.filename.endswith(".npy"):
                        dtype = npy_dtype(f)
                        if dtype.hasobject:
                            return _not(f"member {info.filename}: an object array")
                        continue
                    numeric = False
                    if info.file_size > MAX_MEMBER:
                        return _not(f"member {info.filename}: over {MAX_MEMBER >> 20} MiB")
                    placed = _member(f.read(MAX_MEMBER + 1), depth)
            except Exception as e:  # numpy or zipfile refuses the member
                return _not(f"member {info.filename} does not read ({e})")
            if placed.doubt or placed.code or placed.unsafe:
                return _not(f"member {info.filename}: {placed.doubt or 'code'}")
    return Placed("npz" if numeric and top == "npz" else "zip of data")


def _keras(zf: zipfile.ZipFile, depth: int) -> Placed:
    """A ``.keras`` archive (:mod:`.keras_files`); its other members placed as data."""
    budget = [MAX_PARSE]

    def member(info: zipfile.ZipInfo) -> str:
        budget[0] -= info.file_size
        if budget[0] < 0 or info.file_size > MAX_MEMBER:
            return f"over {MAX_MEMBER >> 20} MiB"
        try:
            with zf.open(info) as f:
                if info.filename.endswith(".npy"):
                    return "an object array" if npy_dtype(f).hasobject else ""
                placed = _member(f.read(MAX_MEMBER + 1), depth)
        except Exception as e:  # numpy or zipfile refuses the member
            return f"does not read ({e})"
        if placed.code or placed.unsafe:
            return "code"
        return placed.doubt

    name, judged, doubts = keras_zip(zf, member)
    return Placed(
        name, doubt="; ".join(doubts + judged.doubts), code=judged.code, unsafe=judged.unsafe
    )


def _tar(buf: Any, size: int, depth: int) -> Placed:
    try:
        tar = tarfile.open(fileobj=io.BufferedReader(BufferFile(buf, 0, size)), mode="r:")  # noqa: SIM115
    except (tarfile.TarError, OSError, ValueError, EOFError):
        return _not("a tar that tarfile does not open")
    budget = MAX_PARSE
    code: list[str] = []
    with tar:
        for info in tar:
            if not info.isfile():
                continue
            budget -= info.size
            if budget < 0:
                return _not(f"members of over {MAX_PARSE >> 20} MiB in all")
            if info.size > MAX_MEMBER:
                return _not(f"member {info.name}: over {MAX_MEMBER >> 20} MiB")
            f = tar.extractfile(info)
            placed = _member(f.read() if f is not None else b"", depth)
            if placed.doubt or placed.unsafe:
                return _not(f"member {info.name}: {placed.doubt or 'code'}")
            code += [f"member {info.name}: {c}" for c in placed.code]
    return Placed("tar of data" if not code else "tar with code", code=code)


def _compressed(buf: Any, size: int, kind: str, depth: int) -> Placed:
    raw = io.BufferedReader(BufferFile(buf, 0, size))
    openers: dict[str, Any] = {
        "gzip": lambda f: gzip.GzipFile(fileobj=f),
        "bz2": bz2.BZ2File,
        "xz": lzma.LZMAFile,
        "lzma": lzma.LZMAFile,
    }
    try:
        if kind in openers:
            with openers[kind](raw) as f:
                data = f.read(MAX_MEMBER + 1)
        elif kind == "zlib":
            d = zlib.decompressobj()
            data = d.decompress(bytes(buf[:size]), MAX_MEMBER + 1)
            if not d.eof or d.unused_data:
                return _not("a zlib stream that does not end where the file ends")
        else:
            return _not(f"a {kind} stream")
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error) as e:
        return _not(f"a {kind} stream that does not decode completely ({e})")
    if len(data) > MAX_MEMBER:
        return _not(f"a {kind} stream of over {MAX_MEMBER >> 20} MiB")
    if kind == "zlib" and _GIT_OBJECT.match(data[:32]):
        return Placed("git object")  # a loose object of git's store, read by git alone
    placed = _member(data, depth)
    if placed.doubt or placed.unsafe:
        return _not(f"a {kind} stream of {placed.doubt or 'code'}")
    return Placed(f"{kind} stream of {placed.format}", code=placed.code)


# --- TFRecord (TensorBoard event files) -----------------------------------------------------

_TFRECORD_MASK = 0xA282EAD8
_MAX_RECORDS = 10_000_000
_CRC_RECORDS = 4096  # records whose length CRC is checked (then the last): CRC-32C in Python


@functools.cache
def _crc32c_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


def _masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (Castagnoli) of ``data``."""
    table = _crc32c_table()
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + _TFRECORD_MASK) & 0xFFFFFFFF


def _tfrecord(buf: Any, size: int) -> Placed | None:
    """A TFRecord file (TensorBoard's ``events.out.tfevents.*``, ``tf.data`` records): records
    of ``length (u64) | masked CRC-32C of length | data | masked CRC of data`` tiling the file
    exactly, the length CRCs of the first 4096 records and of the last one right. TensorBoard and ``tf.data`` parse the records as
    protobufs: nothing in them runs. None: not one."""
    at, count = 0, 0
    while at < size:
        if at + 12 > size or count >= _MAX_RECORDS:
            return None
        head = bytes(buf[at : at + 12])
        length, crc = struct.unpack("<QI", head)
        checked = count < _CRC_RECORDS or at + 16 + length == size  # the first ones, the last
        if (checked and crc != _masked_crc32c(head[:8])) or at + 16 + length > size:
            return None
        at += 16 + length
        count += 1
    return Placed("TFRecord (TensorBoard events)") if count else None


# --- sentencepiece (protobuf) ---------------------------------------------------------------


def _sentencepiece(raw: bytes) -> str:
    """ "sentencepiece model" when ``raw`` is exactly a ``ModelProto``: pieces (field 1: each
    a piece string, score float and type enum), trainer / normalizer / denormalizer specs and
    self-test data (fields 2-5, well-formed messages)."""
    if raw[:1] != b"\x0a":  # the writer puts the pieces (field 1) first
        return ""
    try:
        pieces = 0
        for number, wire, a, b in fields(raw, 0, len(raw)):
            if wire != 2 or not 1 <= number <= 5:
                return ""
            inner = list(fields(raw, a, b))  # every field checked, the specs' too
            if number != 1:
                continue
            for n, w, x, y in inner:
                if (n, w) == (1, 2):
                    raw[x:y].decode("utf-8")
                elif (n, w) not in ((2, 5), (3, 0)):
                    return ""
            pieces += 1
    except (ValueError, UnicodeDecodeError):
        return ""
    return "sentencepiece model" if pieces else ""


# --- GGUF -----------------------------------------------------------------------------------


def _gguf(buf: Any, size: int) -> Placed:
    """The header of a GGUF file (v1-v3, either byte order): every key-value pair and tensor
    record, each tensor inside the file (the listing's own parser, :mod:`..io.gguf_header`)."""
    if byteorder_of(bytes(buf[: min(size, 8)])) is None:
        return _not("a GGUF magic without version 1, 2 or 3")
    try:
        parse_buffer(buf, size)
    except GGUFError as e:
        return _not(f"a GGUF header that does not parse ({e})")
    return Placed("GGUF")


# --- images ---------------------------------------------------------------------------------


def _png(buf: Any, size: int) -> Placed:
    at, first = 8, True
    while at + 12 <= size:
        n, kind = struct.unpack(">I4s", bytes(buf[at : at + 8]))
        end = at + 12 + n
        if end > size or not kind.isalpha() or (first and kind != b"IHDR"):
            break
        (crc,) = struct.unpack(">I", bytes(buf[end - 4 : end]))
        if zlib.crc32(buf[at + 4 : end - 4]) != crc:
            break
        first, at = False, end
        if kind == b"IEND":
            return Placed("PNG image") if at == size else _not("a PNG with bytes after IEND")
    return _not("a PNG whose chunks do not parse")


def _jpeg(buf: Any, size: int) -> Placed:
    at = 2
    while at + 2 <= size:
        if buf[at] != 0xFF:
            break
        marker = buf[at + 1]
        if marker == 0xD9:
            return Placed("JPEG image") if at + 2 == size else _not("a JPEG with bytes after EOI")
        if marker == 0xFF:
            at += 1
            continue
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            at += 2
            continue
        if at + 4 > size:
            break
        (n,) = struct.unpack(">H", bytes(buf[at + 2 : at + 4]))
        at += 2 + n
        if marker == 0xDA:  # entropy-coded data up to the next marker that is not a stuffing
            while True:
                at = _find(buf, b"\xff", at, size)
                if at < 0 or at + 1 >= size:
                    return _not("a JPEG scan that does not end")
                nxt = buf[at + 1]
                if nxt == 0 or 0xD0 <= nxt <= 0xD7:
                    at += 2
                    continue
                break
    return _not("a JPEG whose segments do not parse")


def _find(buf: Any, sub: bytes, start: int, end: int) -> int:
    if hasattr(buf, "find"):
        return int(buf.find(sub, start, end))
    at = bytes(buf[start:end]).find(sub)
    return at + start if at >= 0 else -1


def _gif(buf: Any, size: int) -> Placed:
    def color_table(flags: int) -> int:
        return 3 * (2 << (flags & 7)) if flags & 0x80 else 0

    def sub_blocks(at: int) -> int:
        while at < size and buf[at]:
            at += 1 + buf[at]
        return at + 1

    try:
        at = 13 + color_table(buf[10])
        while at < size:
            tag = buf[at]
            if tag == 0x3B:
                return Placed("GIF image") if at + 1 == size else _not("a GIF with trailing bytes")
            if tag == 0x21:
                at = sub_blocks(at + 2)
            elif tag == 0x2C:
                at = sub_blocks(at + 10 + color_table(buf[at + 9]) + 1)
            else:
                break
    except IndexError:
        pass
    return _not("a GIF whose blocks do not parse")


def _webp(buf: Any, size: int) -> Placed:
    riff, kind = struct.unpack("<I4s", bytes(buf[4:12]))
    if kind != b"WEBP" or riff + 8 != size:
        return _not("a RIFF that is not one WebP image")
    at = 12
    while at + 8 <= size:
        (n,) = struct.unpack("<I", bytes(buf[at + 4 : at + 8]))
        at += 8 + n + (n & 1)
    return Placed("WebP image") if at == size else _not("a WebP whose chunks do not parse")


def _bmp(buf: Any, size: int) -> Placed:
    if size < 26:
        return _not("a BMP too short for its header")
    total, _reserved, pixels, dib = struct.unpack("<IIII", bytes(buf[2:18]))
    if total != size or dib not in (12, 40, 52, 56, 64, 108, 124) or not 14 + dib <= pixels <= size:
        return _not("a BMP whose header does not match the file")
    return Placed("BMP image")


# --- git's object store (a cloned model repository's .git) ---------------------------------

_GIT_FILES = {
    b"PACK": ("git pack", (2, 3)),
    b"\xfftOc": ("git pack index", (2,)),
    b"DIRC": ("git index", (2, 3, 4)),
    b"RIDX": ("git reverse index", (1,)),
    b"MIDX": ("git multi-pack index", None),
    b"CGPH": ("git commit graph", None),
    b"BITM": ("git bitmap index", None),
}
_GIT_OBJECT = re.compile(rb"(blob|tree|commit|tag) \d{1,20}\x00")


def _git(buf: Any, size: int) -> Placed:
    """A file of git's object store, read by git alone (its version field checked)."""
    head = bytes(buf[: min(size, 8)])
    name, versions = _GIT_FILES[head[:4]]
    if versions is None:
        version_ok = len(head) >= 5 and head[4] == 1
    else:
        version_ok = len(head) == 8 and int.from_bytes(head[4:8], "big") in versions
    return Placed(name) if version_ok else _not(f"a {name} of an unknown version")


_DS_STORE = b"\x00\x00\x00\x01Bud1"

_MAGIC_CHECKS = (
    *((magic, _git) for magic in _GIT_FILES),
    (_DS_STORE, lambda buf, size: Placed("macOS folder metadata (.DS_Store)")),
    (b"GGUF", _gguf),
    (b"\x89PNG\r\n\x1a\n", _png),
    (b"\xff\xd8\xff", _jpeg),
    (b"GIF87a", _gif),
    (b"GIF89a", _gif),
    (b"RIFF", _webp),
    (b"BM", _bmp),
)


__all__ = ["PROVEN", "Placed", "place", "text_code"]
