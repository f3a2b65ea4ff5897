"""Compressed streams as the most lenient consumer decodes them: every byte a decoder hands
out before it fails.

``joblib.load`` picks its decoder by the first bytes (``compressor.py``: ``ZF``, ``x``,
``\\x1f\\x8b``, ``BZ``, ``]\\x00``, the xz magic, the lz4 magic) and ``pandas.read_pickle`` by
the file's suffix (``get_handle``: ``.gz``, ``.bz2``, ``.xz``, ``.zst``, ``.zip`` and the tar
suffixes). Both then *stream* the pickle out of the decoder, so what a load runs is what the
decoder yielded before its error: a gzip member with no trailer or a bad CRC, trailing junk, an
xz or bz2 stream cut short. The decoders here follow the stdlib readers those consumers use
(``gzip.GzipFile``, ``bz2.BZ2File``, ``lzma.LZMAFile`` with ``FORMAT_AUTO``, joblib's
``BinaryZlibFile``) and keep everything decoded up to the failure; after a failure the stream
is decoded again one byte per call from where the failing call began, so that no byte a
reader asking for less at a time could get is lost. The output is bounded by the file's
inflation budget.
"""

from __future__ import annotations

import bz2
import importlib
import lzma
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from . import views_archive
from .judged import MAX_INFLATED, Judged

STEP = 1 << 13  # output asked of the decoder per call (the stdlib readers' buffer size)
_IN = 1 << 14  # input fed per call
_FINE = 2 * STEP  # after a failure: output decoded again one byte per call, this far
LZMA_MEMLIMIT = 1 << 30  # an xz stream needing more than this is not decoded (unverified)
# an lzma-alone dictionary is lowered to this: a stream's references reach back at most as
# far as its output so far, which the budget keeps under it, so the output is the same
_ALONE_DICT = MAX_INFLATED

# joblib's prefixes (compressor.py) in its detection order; "ZF" is its pre-0.10 format
_MAGICS = (
    (b"ZF", "joblib-zlib"),
    (b"\x1f\x8b", "gzip"),
    (b"BZ", "bz2"),
    (b"]\x00", "lzma"),
    (b"\xfd7zXZ", "xz"),
    (b"\x04\x22\x4d\x18", "lz4"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)
# pandas.io.common.extension_to_compression, in its order (the first suffix that matches wins)
PANDAS_SUFFIXES = (
    (".tar", "tar"),
    (".tar.gz", "tar"),
    (".tar.bz2", "tar"),
    (".tar.xz", "tar"),
    (".gz", "gzip"),
    (".bz2", "bz2"),
    (".zip", "zip"),
    (".xz", "xz"),
    (".zst", "zstd"),
)
_PACKAGES = {"lz4": "lz4.frame", "zstd": "zstandard"}


def compression(head: bytes) -> str:
    """The compression ``joblib.load`` would undo, told by the first bytes; "" for none."""
    for magic, name in _MAGICS:
        if head.startswith(magic):
            return name
    if len(head) >= 2 and head[0] == 0x78 and (head[0] << 8 | head[1]) % 31 == 0:
        return "zlib"
    return ""


def pandas_compression(name: str) -> str:
    """What ``pandas.read_pickle(name)`` undoes (``infer_compression``); "" for none."""
    low = name.lower()
    for suffix, kind in PANDAS_SUFFIXES:
        if low.endswith(suffix):
            return kind
    return ""


def judge_streams(
    buf: Any,
    start: int,
    end: int,
    where: str,
    head: bytes,
    scope: Any,
    depth: int,
    judge: Callable[..., Any],
    name: str = "",
) -> Judged:
    """What joblib (by the first bytes) and pandas (by ``name``, the file's name, "" below
    the top) get out of ``buf[start:end]`` by decompressing it, judged as bytes of their own.

    ``pandas.read_pickle`` opens ``.xz`` with ``LZMAFile``, which takes lzma-alone with any
    first byte, and the tar suffixes with ``tarfile.open(mode="r")``, which tries the same
    before a plain tar; the gzip, bz2 and zstd readers need their magic, told by the bytes."""
    out = Judged()
    kinds = {}  # kind -> whether its bytes are read as a pickle (else only as a tar)
    content = compression(head)
    if content:
        kinds[content] = True
    by_name = pandas_compression(name)
    if by_name in ("xz", "tar") and content not in ("xz", "lzma"):
        kinds["lzma"] = by_name == "xz"
    for kind, as_pickle in kinds.items():
        got = decode(buf, start, end, kind, scope)
        if got.doubt:
            out.doubts.append(f"{where}: {got.doubt}")
        if not got.data:
            continue
        label = f"{where} ({kind}-decompressed)"
        if as_pickle:
            inner = judge(got.data, 0, len(got.data), label, scope, depth + 1)
        elif views_archive.is_tar(got.data, 0, len(got.data)):
            inner = views_archive.judge_tar(
                got.data, 0, len(got.data), label, scope, depth + 1, judge
            )
        else:
            continue
        inner.formats.insert(0, f"{kind} stream")
        if got.stop and inner.streams:
            inner.notes.append(
                f"{label}: the decoder stops after {len(got.data)} bytes ({got.stop}); a "
                "consumer streams what came before, which was judged"
            )
        out.add(inner)
    return out


class _Ended(Exception):
    """The stream ends here, for a reason these readers tell (every byte decoded before was
    handed out)."""


@dataclass
class Decoded:
    """What a decoder yields: ``data`` (b"" when it takes nothing), ``stop`` (why it stopped
    before a clean end, "" for a clean end) and ``doubt`` (a limit that keeps the stream from
    being judged completely)."""

    data: bytes
    stop: str = ""
    doubt: str = ""


Step = Callable[[int], int]
Decoder = Callable[[Any, int, int, Step], Iterator[bytes]]


def decode(buf: Any, start: int, end: int, kind: str, scope: Any) -> Decoded:
    """The bytes a consumer's ``kind`` decoder yields from ``buf[start:end]`` before it stops,
    charged to the file's inflation budget."""
    decoder = _decoder(kind)
    if decoder is None:
        package = _PACKAGES.get(kind, kind)
        return Decoded(b"", doubt=f"{kind}-compressed: not judged ({package} is not installed)")
    limit = max(MAX_INFLATED - scope.inflated, 0)
    budget = getattr(scope, "budget", None)
    chunks, got, stop = _run(decoder, buf, start, end, limit + 1, None, budget)
    if stop.startswith("?") and got <= limit:  # a decoder call failed, with what it held
        again, got2, stop2 = _run(decoder, buf, start, end, limit + 1, got, budget)
        if got2 > got:
            chunks, got, stop = again, got2, stop2
    doubt, stop = "", stop.removeprefix("?")
    if stop.startswith("!"):
        doubt, stop = f"{kind}-compressed: {stop[1:]}", ""
    if got > limit:
        chunks[-1] = chunks[-1][: len(chunks[-1]) - (got - limit)]
        stop = ""
        doubt = (
            f"{kind}-compressed to over {limit >> 20} MiB (the file's inflation budget): "
            "not judged completely"
        )
    data = b"".join(chunks)
    del chunks[:]
    scope.inflated += len(data)
    return Decoded(data, stop, doubt)


def _run(
    decoder: Decoder,
    buf: Any,
    start: int,
    end: int,
    most: int,
    fine_from: int | None,
    budget: Any = None,
) -> tuple[list[bytes], int, str]:
    """(chunks, their length, why it stopped: "" clean, "!..." a limit, "?..." a decoder call
    that failed, losing what it held) for up to ``most`` bytes; from output ``fine_from`` on,
    one byte per decoder call for ``_FINE`` bytes. ``budget``: the file's time limit
    (:class:`.pickle_machine.Budget`), checked after each chunk."""
    deadline = getattr(budget, "deadline", None)

    def step(pos: int) -> int:
        if fine_from is not None and fine_from <= pos < fine_from + _FINE:
            return 1
        return min(STEP, max(most - pos, 1))

    chunks: list[bytes] = []
    got = 0
    try:
        for chunk in decoder(buf, start, end, step):
            chunks.append(chunk)
            got += len(chunk)
            if got >= most:
                break
            if deadline is not None and time.thread_time() > deadline:
                return chunks, got, f"!decoding stopped at the time limit ({budget.seconds_words})"
    except _Ended as e:  # everything decoded was handed out before this
        return chunks, got, f"{e}"
    except MemoryError:
        return chunks, got, "!the decoder ran out of memory"
    except lzma.LZMAError as e:
        if "memory" in str(e).lower():
            return chunks, got, f"!a dictionary over {LZMA_MEMLIMIT >> 20} MiB ({e})"
        return chunks, got, f"?{e}"
    except (OSError, EOFError, ValueError, zlib.error, struct.error) as e:
        return chunks, got, f"?{e}"
    except Exception as e:  # a third-party decoder's own error
        return chunks, got, f"?{type(e).__name__}: {e}"
    return chunks, got, ""


def _decoder(kind: str) -> Decoder | None:
    if kind == "gzip":
        return _gzip
    if kind == "bz2":
        return lambda b, s, e, st: _streams(b, s, e, st, bz2.BZ2Decompressor, OSError)
    if kind in ("xz", "lzma"):
        return _lzma
    if kind == "zlib":
        return _zlib
    if kind == "joblib-zlib":  # joblib < 0.10: "ZF", the length in 19 hex chars, zlib
        return lambda b, s, e, st: _zlib(b, s + 21 + (bytes(b[s + 21 : s + 22]) == b" "), e, st)
    if kind == "lz4":
        frame = _optional("lz4.frame")
        if frame is None:
            return None
        return lambda b, s, e, st: _streams(b, s, e, st, frame.LZ4FrameDecompressor, Exception)
    if kind == "zstd":
        zstandard = _optional("zstandard")
        return None if zstandard is None else _zstd(zstandard)
    return None


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _auto() -> Any:
    return lzma.LZMADecompressor(lzma.FORMAT_AUTO, memlimit=LZMA_MEMLIMIT)


def _streams(
    buf: Any,
    start: int,
    end: int,
    step: Step,
    new: Callable[[], Any],
    trailing: Any,
    prepare: Callable[[bytes], bytes] = bytes,
) -> Iterator[bytes]:
    """``_compression.DecompressReader``'s loop (``BZ2File``, ``LZMAFile``): streams one
    after another; bytes after the last that do not start another are ignored.
    ``prepare``: applied to the first input of each stream."""
    feed = _Feed(buf, start, end)
    dec, pos, first = new(), 0, True
    while True:
        if dec.eof:
            rest = dec.unused_data or feed.next()
            if not rest:
                return
            dec = new()
            try:
                data = dec.decompress(prepare(rest), step(pos))
            except trailing:
                return  # the reader takes the junk for the end of the file
        elif dec.needs_input and feed.at < end:
            chunk = feed.next()
            data = dec.decompress(prepare(chunk) if first else chunk, step(pos))
        elif dec.needs_input:  # all input in: what the decoder still holds, then the error
            data = dec.decompress(b"", step(pos))
            if not data:
                raise _Ended("the stream ends before its end-of-stream marker")
        else:
            data = dec.decompress(b"", step(pos))
        first = False
        if data:
            pos += len(data)
            yield data


def _lzma(buf: Any, start: int, end: int, step: Step) -> Iterator[bytes]:
    """``lzma.LZMAFile(f, "rb")``: ``FORMAT_AUTO``, an xz stream or lzma-alone with any
    properties and dictionary size (liblzma's lenient alone decoder)."""
    yield from _streams(buf, start, end, step, _auto, lzma.LZMAError, _cap_alone_dict)


def _cap_alone_dict(first: bytes) -> bytes:
    """An lzma-alone header's dictionary size lowered to ``_ALONE_DICT`` (see there)."""
    if len(first) < 5 or first[0] == 0xFD or first.startswith(b"LZIP"):
        return first  # xz, or lzip (liblzma's auto decoder takes both by their magic)
    size = int.from_bytes(first[1:5], "little")
    if size <= _ALONE_DICT:
        return first
    return first[:1] + _ALONE_DICT.to_bytes(4, "little") + first[5:]


class _Feed:
    """Input handed to a decoder ``_IN`` bytes at a time; ``at`` is where the next begins."""

    def __init__(self, buf: Any, at: int, end: int) -> None:
        self.buf, self.at, self.end = buf, at, end

    def next(self) -> bytes:
        chunk = bytes(self.buf[self.at : min(self.end, self.at + _IN)])
        self.at += len(chunk)
        return chunk


def _deflate(dec: Any, feed: _Feed, step: Step, pos: int, *, eof_error: bool) -> Iterator[bytes]:
    """One zlib/deflate stream; after it ends, ``feed.at`` less ``dec.unused_data`` is where
    it ended."""
    while not dec.eof:
        if dec.unconsumed_tail:
            data = dec.decompress(dec.unconsumed_tail, step(pos))
        else:
            chunk = feed.next()
            data = dec.decompress(chunk, step(pos))
            if not chunk and not data:  # all input in, and nothing more held
                if eof_error:
                    raise _Ended("the stream ends before its end-of-stream marker")
                return
        if data:
            pos += len(data)
            yield data


def _zlib(buf: Any, start: int, end: int, step: Step) -> Iterator[bytes]:
    """joblib's ``BinaryZlibFile``: one zlib stream; the file's end is a clean end."""
    dec = zlib.decompressobj(zlib.MAX_WBITS)
    yield from _deflate(dec, _Feed(buf, start, end), step, 0, eof_error=False)


def _gzip(buf: Any, start: int, end: int, step: Step) -> Iterator[bytes]:
    """``gzip.GzipFile``'s reader: members one after another, zero padding between them, the
    header CRC read but not checked; a member's trailer checked after its bytes are handed
    out. (joblib's ``BinaryGzipFile`` reads the first member only, and checks more.)"""
    at, pos, member = start, 0, 0
    while True:
        if member:
            at = _skip_zeros(buf, at, end)
        if at >= end:
            return
        if bytes(buf[at : at + 2]) != b"\x1f\x8b":
            if member:
                raise _Ended(f"not a gzip member at byte {at - start}")
            return
        feed = _Feed(buf, _gzip_header(buf, at + 2, end), end)
        dec = zlib.decompressobj(-zlib.MAX_WBITS)
        crc = size = 0
        for data in _deflate(dec, feed, step, pos, eof_error=True):
            crc, size, pos = zlib.crc32(data, crc), size + len(data), pos + len(data)
            yield data
        at = feed.at - len(dec.unused_data)
        trailer = bytes(buf[at : min(end, at + 8)])
        if len(trailer) < 8:
            raise _Ended("a gzip member without its trailer")
        stored_crc, stored_size = struct.unpack("<II", trailer)
        if stored_crc != crc or stored_size != size & 0xFFFFFFFF:
            raise _Ended("a gzip member whose CRC or length does not match")
        at, member = at + 8, member + 1


def _skip_zeros(buf: Any, at: int, end: int) -> int:
    while at < end:
        chunk = bytes(buf[at : min(end, at + _IN)])
        rest = chunk.lstrip(b"\0")
        at += len(chunk) - len(rest)
        if rest:
            break
    return at


def _gzip_header(buf: Any, at: int, end: int) -> int:
    """The offset after a gzip header whose magic ended at ``at`` (``_read_gzip_header``)."""
    fixed = bytes(buf[at : at + 8])
    if len(fixed) < 8:
        raise _Ended("a gzip header cut short")
    method, flags = fixed[0], fixed[1]
    if method != 8:
        raise _Ended("a gzip member with an unknown compression method")
    at += 8
    if flags & 4:  # FEXTRA
        raw = bytes(buf[at : at + 2])
        if len(raw) < 2:
            raise _Ended("a gzip header cut short")
        at += 2 + struct.unpack("<H", raw)[0]
        if at > end:
            raise _Ended("a gzip header cut short")
    for flag in (8, 16):  # FNAME, FCOMMENT: up to a NUL or the end
        if flags & flag:
            at = _after_nul(buf, at, end)
    if flags & 2:  # FHCRC
        at += 2
        if at > end:
            raise _Ended("a gzip header cut short")
    return at


def _after_nul(buf: Any, at: int, end: int) -> int:
    while at < end:
        chunk = bytes(buf[at : min(end, at + _IN)])
        i = chunk.find(b"\0")
        if i >= 0:
            return at + i + 1
        at += len(chunk)
    return end


def _zstd(zstandard: Any) -> Decoder:
    def run(buf: Any, start: int, end: int, step: Step) -> Iterator[bytes]:
        """pandas' ``zstandard.open(..., "rb")``: the first frame, input fed 4 KiB a call."""
        dobj = zstandard.ZstdDecompressor().decompressobj()
        for at in range(start, end, 4096):
            data = dobj.decompress(bytes(buf[at : min(end, at + 4096)]))
            if data:
                yield data
            if getattr(dobj, "eof", False):
                return
        raise _Ended("the stream ends before its end-of-stream marker")

    return run
