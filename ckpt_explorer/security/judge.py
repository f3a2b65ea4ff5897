"""One file, one verdict: ``unsafe``, ``code``, ``unverified``, ``safe`` or ``data``.

The file's bytes go through every view of :mod:`.views`; each pickle a loader would unpickle
is then judged against the allow-list (:mod:`.inert`):

* ``unsafe``: code would run: a global that is not known inert is called (``REDUCE``,
  ``NEWOBJ``, ``INST``, ``OBJ``), has its instance's state set, or is one that runs commands,
  code, imports, files or network by itself (``os.system`` named is enough); a class or
  function of the running process is patched; a module in the checkpoint's folder shadows one
  the load imports; an archive whose plain loader loads native code it holds (an AOTInductor
  package under ``torch.export.load``);
* ``code``: the file is code that a consumer imports or runs when asked to, or by being
  found (a Python module or ``.pth`` in the folder, ``auto_map`` with ``trust_remote_code``, a
  TorchScript archive): not run by a plain load, but code all the same;
* ``unverified``: a loader could unpickle it but the walk could not judge it completely (an
  archive two readers read differently, a construct the walk cannot follow, a global that is
  only imported, a limit reached);
* ``safe``: every pickle was walked to where its loader stops and every global is inert;
* ``data``: a format :mod:`.known_formats` parsed completely, which no loader unpickles or
  runs (safetensors, JSON, text, numeric ``.npy``); bytes it cannot place are ``unverified``.

Nothing is unpickled, imported or called.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..finding import Finding
from ..io.location import Location, as_location
from ..io.range_buffer import RangeBuffer
from .inert import inert_reason, what_it_does
from .keras_files import beside_pickles
from .known_formats import PROVEN, place
from .pickle_machine import BigBytes, GlobalRef, PickleWalk, walk_pickle
from .views import Judged, Scope, Stream, judge_region
from .weights_only import refusals

CODE = "security.code_execution"
UNVERIFIED = "security.unverified"
SHIPS_CODE = "security.ships_code"  # the verdict ``code``
REFUSED = "security.weights_only_refused"
CONTAINER = "security.container"
VERDICTS = ("unsafe", "code", "unverified", "safe", "data")
_CODE_HINT = (
    "Do not load this file with torch.load(weights_only=False), pickle, numpy.load("
    "allow_pickle=True), joblib or a tool that does; get the weights from a trusted source, or "
    "as safetensors."
)
_SHIPS_CODE_HINT = (
    "This is code, not data: read it before anything imports or runs it (do not start Python "
    "in this folder, do not pass trust_remote_code=True), or remove it and scan again; "
    "--allow-code lets it pass when you mean to ship it."
)
_UNVERIFIED_HINT = (
    "It could not be proven safe: load it only if you trust its source, or re-save it from a "
    "trusted copy with torch.save / safetensors and scan again."
)
EMBEDDED_OPS = 5_000_000  # opcodes of embedded pickles walked per stream by stream_findings
TORCH_SUFFIXES = frozenset({".pt", ".pth", ".bin", ".ckpt", ".pt2", ".tar"})


@dataclass
class FileVerdict:
    """The verdict on one file, its findings (each naming where and why), and its format."""

    path: Path | Location
    label: str
    verdict: str = "data"
    format: str = ""
    findings: list[Finding] = field(default_factory=list)
    pickles: int = 0
    nbytes: int = 0
    unreadable: str = ""  # the path could not be read at all
    imports: set[str] = field(default_factory=set)  # top-level modules its pickles import
    modules: set[str] = field(default_factory=set)  # the same, as the full dotted names

    @property
    def unsafe(self) -> bool:
        return self.verdict == "unsafe"

    @property
    def reasons(self) -> list[str]:
        """One line per finding that decides the verdict."""
        decisive = {"unsafe": CODE, "code": SHIPS_CODE, "unverified": UNVERIFIED}.get(self.verdict)
        return [f.message for f in self.findings if f.rule == decisive]

    @property
    def checkpoint_format(self) -> str | None:
        """The judged file's format ("pickle" for a plain pickle), None for data."""
        return None if self.verdict == "data" else self.format or "pickle"


def judge_file(
    path: Path | Location,
    label: str | None = None,
    *,
    extra: Judged | None = None,
    explained: bool = False,
) -> FileVerdict:
    """The verdict on one regular file.

    Args:
        extra: more pickles found for this file by the folder it lies in (DCP items).
        explained: the file is a DCP data file whose items ``extra`` judged: that it is not
            one canonical archive is expected (its views are still judged).
    """
    label = label or str(path)
    verdict = FileVerdict(path, label)
    try:
        verdict.nbytes = path.stat().st_size
        judged = _judge_bytes(path, label, verdict.nbytes, explained)
    except (OSError, ValueError) as e:
        judged = Judged(doubts=[f"{label}: cannot be read ({getattr(e, 'strerror', None) or e})"])
    if extra is not None:
        judged.add(extra)
    decide(verdict, judged, [], [])
    if explained:
        verdict.format = "DCP data file"
    return verdict


@contextlib.contextmanager
def file_bytes(path: Path | Location, size: int) -> Iterator[Any]:
    """The file's bytes as a buffer: a read-only map of a local file (only the pages the
    views touch are read), or a :class:`RangeBuffer` reading blocks through the store."""
    local = as_location(path).local_path()
    if local is None:
        yield RangeBuffer(as_location(path), size)
        return
    with open(local, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        random_access(mm)
        yield mm


def _judge_bytes(path: Path | Location, label: str, size: int, explained: bool) -> Judged:
    if size == 0:
        return Judged(formats=["empty file"])
    torch_suffix = path.suffix.lower() in TORCH_SUFFIXES
    with file_bytes(path, size) as mm:
        scope = Scope(explained=explained, torch_suffix=torch_suffix, name=path.name)
        judged = judge_region(mm, 0, size, label, scope, top=True)
        found = (
            any(s.walk.did_anything or s.walk.doubts for s in judged.streams) or judged.doubts
        )  # a pickle, or bytes already unverified: nothing left to place
        if not found and not explained:  # a DCP data file: its items are judged by the folder
            _place(judged, mm, size, label, as_location(path))
        elif not explained:  # pickles, and maybe a Keras model beside them (a polyglot)
            _keras_beside(judged, mm, size, label, as_location(path))
        return detach(judged)


def random_access(mm: mmap.mmap) -> None:
    """No readahead on this map: only the pages the views touch are read (a fault in a large
    file would otherwise pull megabytes of tensor bytes into memory)."""
    advice = getattr(mmap, "MADV_RANDOM", None)
    if advice is not None:
        mm.madvise(advice)


def detach(judged: Judged) -> Judged:
    """Take every stream's findings while its bytes are still mapped, then drop the bytes."""
    for s in judged.streams:
        if s.findings is None:
            s.findings = stream_findings(s, s.where)
        s.buf = None
    return judged


def decide(verdict: FileVerdict, judged: Judged, unsafe: list[str], doubts: list[str]) -> None:
    """Set the verdict and findings of ``verdict`` from what was judged."""
    label = verdict.label
    out: list[Finding] = []
    for s in judged.streams:
        out += s.findings if s.findings is not None else stream_findings(s, s.where)
    out += [Finding(CODE, "error", m, _CODE_HINT) for m in [*judged.unsafe, *unsafe]]
    out += [Finding(SHIPS_CODE, "error", m, _SHIPS_CODE_HINT) for m in judged.code]
    out += [Finding(UNVERIFIED, "error", m, _UNVERIFIED_HINT) for m in [*judged.doubts, *doubts]]
    out += [Finding(CONTAINER, "info", m, "") for m in judged.notes]
    verdict.findings = _unique([replace(f, file=label) for f in out])
    verdict.pickles = sum(1 for s in judged.streams if s.walk.did_anything)
    for s in judged.streams:
        verdict.modules |= {g.module for g in s.walk.globals} | set(s.walk.failed_imports)
    verdict.imports |= {m.split(".")[0] for m in verdict.modules}
    formats = [f for f in judged.formats if f]
    verdict.format = formats[0] if formats else ""
    rules = {f.rule for f in verdict.findings if f.severity == "error"}
    if CODE in rules:
        verdict.verdict = "unsafe"
    elif SHIPS_CODE in rules:
        verdict.verdict = "code"
    elif UNVERIFIED in rules:
        verdict.verdict = "unverified"
    elif verdict.pickles:
        verdict.verdict = "safe"
    else:
        verdict.verdict = "data"


def _unique(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str]] = set()
    out = []
    for f in findings:
        if (f.rule, f.message) not in seen:
            seen.add((f.rule, f.message))
            out.append(f)
    return out


def stream_findings(stream: Stream, where: str) -> list[Finding]:
    """The findings of one walked pickle: code execution, doubts, torch's own refusal.

    A stream of bytes that merely look like a pickle (``only_code``) gives its code findings
    only. Bytes a byte loader loads that no view judged (:func:`.views.nested_loads` judges them
    where the pickle is a file's) make the file unverified; embedded pickles no view walked are
    walked here, all of them, within :data:`EMBEDDED_OPS` opcodes.
    """
    walk = stream.walk
    out = _code_findings(walk, where)
    if stream.only_code:
        return [f for f in out if f.rule == CODE]
    out += [
        Finding(UNVERIFIED, "error", f"{where}: at byte {at} {why}", _UNVERIFIED_HINT)
        for at, why in walk.doubts
    ]
    if walk.error and walk.did_anything and not walk.complete:
        out.append(
            Finding(
                CONTAINER,
                "info",
                f"{where}: the load stops at byte {walk.end} ({walk.error}); what ran before that "
                "was judged",
                "",
            )
        )
    for at, loader, _data in walk.nested_loads:
        out.append(
            Finding(
                UNVERIFIED,
                "error",
                f"{where}: the bytes {loader} loads at byte {at} are not judged here",
                _UNVERIFIED_HINT,
            )
        )
    out += _embedded_findings(stream, where)
    if stream.torch_loads and stream.buf is not None:
        out += _refusal(stream, where)
    return out


def _embedded_findings(stream: Stream, where: str) -> list[Finding]:
    """Code in the embedded pickles of a stream no view walked them for (all of them)."""
    out: list[Finding] = []
    budget = EMBEDDED_OPS
    todo = [(stream.walk, stream.buf, where)]
    while todo:
        walk, buf, label = todo.pop()
        for offset, inner in walk.embedded:
            inner_where = f"{label}, a pickle embedded as bytes at byte {offset}"
            if isinstance(inner, BigBytes):
                if buf is None:
                    out.append(Finding(UNVERIFIED, "error", f"{inner_where}: not walked", ""))
                    continue
                nested = walk_pickle(buf, inner.offset, inner.offset + inner.length, max_ops=budget)
                inner_buf = buf
            else:
                nested = walk_pickle(inner, max_ops=budget)
                inner_buf = inner
            budget = max(budget - nested.ops, 1)
            out += [f for f in _code_findings(nested, inner_where) if f.rule == CODE]
            if nested.limit or budget <= 1:
                msg = f"{inner_where}: over {EMBEDDED_OPS:,} opcodes in embedded pickles"
                return [*out, Finding(UNVERIFIED, "error", msg, _UNVERIFIED_HINT)]
            todo.append((nested, inner_buf, inner_where))
    return out


def _code_findings(walk: PickleWalk, where: str) -> list[Finding]:
    out: list[Finding] = []
    called: dict[GlobalRef, str] = {}
    for c in walk.calls:
        if c.target is not None and c.target not in called:
            called[c.target] = f"{c.opcode} at byte {c.offset}"
    seen: set[str] = set()
    for ref in walk.globals:
        if inert_reason(ref.module, ref.name) is not None or ref.qualified in seen:
            continue
        seen.add(ref.qualified)
        does = what_it_does(ref.module, ref.name)
        how = called.get(ref)
        named = f"{where}: {ref.opcode} at byte {ref.offset} names {ref.qualified}"
        if how or not does.startswith("imports "):
            out.append(
                Finding(
                    CODE,
                    "error",
                    f"{named} ({how or 'not called'}); when unpickled (torch.load(weights_only="
                    f"False), pickle.load, numpy.load(allow_pickle=True), joblib.load) this {does}",
                    _CODE_HINT,
                )
            )
        else:
            out.append(
                Finding(
                    UNVERIFIED,
                    "error",
                    f"{named}, not called: loading it {does.replace('and calls', 'and takes')}",
                    _UNVERIFIED_HINT,
                )
            )
    for c in walk.calls:
        if c.on_global_itself and c.target is not None:
            out.append(
                Finding(
                    CODE,
                    "error",
                    f"{where}: {c.opcode} at byte {c.offset} changes {c.target.qualified} itself "
                    "(patches code of the running process)",
                    _CODE_HINT,
                )
            )
    return out


def _refusal(stream: Stream, where: str) -> list[Finding]:
    found = refusals(stream.buf, stream.walk)
    if not found:
        return []
    first = found[0]
    names = sorted({r.what for r in found if not r.what.isupper()} - {first.what})
    also = f"; it also names {', '.join(names[:6])}" if names else ""
    every = [first.what, *names]
    if any(n.startswith("deepspeed.") for n in every):
        also += " (DeepSpeed's own load_checkpoint passes weights_only=False)"
    # DeepSpeed's own records alone (audited inert): only DeepSpeed reads such a file, and it
    # does so with weights_only=False; a refusal there is worth knowing, not a fault
    only_deepspeed = all(
        n.startswith("deepspeed.") and inert_reason(*n.rsplit(".", 1)) is not None for n in every
    )
    return [
        Finding(
            REFUSED,
            "info" if only_deepspeed else "error",
            f"{where}: torch.load(weights_only=True), the default since torch 2.6, refuses "
            f"{first.what} at byte {first.offset} ({first.why}){also}",
            _refusal_hint([r.what for r in found]),
        )
    ]


def _refusal_hint(whats: list[str]) -> str:
    names = sorted({w for w in whats if not w.isupper()})
    if not names:
        return "Re-save with torch.save (its default pickle protocol 2), or as safetensors."
    inert = [n for n in names if inert_reason(*n.rsplit(".", 1)) is not None]
    if len(inert) < len(names):
        return (
            "Do not allow-list these globals: some could run code. Get a trusted copy, or "
            "re-save the tensors as safetensors."
        )
    return (
        f"If you trust the file: torch.serialization.add_safe_globals([{', '.join(names)}]) "
        "before torch.load; better, re-save it without those objects (a state_dict of tensors "
        "and plain values), or as safetensors."
    )


def _place(judged: Judged, mm: Any, size: int, label: str, path: Location) -> None:
    """``data`` only for a format :mod:`.known_formats` proves; anything else is a doubt."""
    head = bytes(mm[: min(size, 64)]).lstrip()
    json_text = not judged.formats and head[:1] in (b"{", b"[") and _is_json_text(path)
    local = path.local_path()
    placed = place(mm, size, judged.formats, label, json_text, str(local) if local else None)
    judged.formats.insert(0, placed.format)
    judged.code += [f"{label}: {m}" for m in placed.code]
    judged.unsafe += [f"{label}: {m}" for m in placed.unsafe]
    if placed.doubt:
        judged.doubts.append(
            f"{label}: bytes the gate cannot place: {placed.doubt}. No loader it models finds a "
            f"pickle in them, but only these formats are proven data: {PROVEN}; if you know "
            "what this file is, check it with the tool that reads it"
        )


def _keras_beside(judged: Judged, mm: Any, size: int, label: str, path: Location) -> None:
    local = path.local_path()
    found = beside_pickles(mm, size, str(local) if local else None)
    judged.unsafe += [f"{label}: {m}" for m in found.unsafe]
    judged.code += [f"{label}: {m}" for m in found.code]
    judged.doubts += [f"{label}: {m}" for m in found.doubts]


def _is_json_text(path: Location) -> bool:
    """The file is JSON as UTF-8 text (parsed once, and cached, for the listing too)."""
    from ..io.json_doc import json_document

    try:
        json_document(path)
    except (OSError, ValueError, RecursionError):
        return False
    return True


__all__ = [
    "CODE",
    "REFUSED",
    "SHIPS_CODE",
    "UNVERIFIED",
    "VERDICTS",
    "FileVerdict",
    "judge_file",
]
