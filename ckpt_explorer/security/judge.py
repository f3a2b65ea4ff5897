"""Judge every pickle of a file: security.code_execution, weights_only_refused, container.

One reading per pickle (:func:`~.opcodes.record_pickle`), judged three ways. Nothing is
unpickled, imported or called.
"""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..validate.findings import Finding
from . import container
from .inert import inert_reason, what_it_does
from .opcodes import MAX_NESTED, Buffer, PickleRecord, record_pickle
from .sources import LEGACY_PICKLES, PT2_NESTED, PickleSource, pickle_sources, sniff
from .weights_only import refusals

CODE = "security.code_execution"
REFUSED = "security.weights_only_refused"
_CODE_HINT = (
    "Do not load this file with torch.load(weights_only=False), pickle or a tool that does; "
    "get the weights from a trusted source, or as safetensors."
)


@dataclass
class FileVerdict:
    """The security findings of one file; ``unreadable`` says why it could not be judged."""

    path: Path
    label: str
    kind: str | None
    findings: list[Finding] = field(default_factory=list)
    unreadable: str = ""
    pickles: int = 0
    nbytes: int = 0

    @property
    def unsafe(self) -> bool:
        return any(f.rule == CODE for f in self.findings)

    @property
    def verdict(self) -> str:
        if self.unsafe:
            return "unsafe"
        if self.unreadable:
            return "unreadable"
        if any(f.severity == "error" for f in self.findings):
            return "refused"
        return "safe" if self.kind else "no pickle"


def judge_file(path: Path, label: str | None = None) -> FileVerdict:
    """Every security finding of one file (a torch zip or legacy file, or a plain pickle)."""
    label = label or str(path)
    kind = sniff(path)
    verdict = FileVerdict(path, label, kind)
    if kind is None:
        return verdict
    try:
        verdict.nbytes = path.stat().st_size
        if kind == "zip":
            verdict.findings += container.zip_findings(path, label)
        for source in pickle_sources(path, kind):
            verdict.pickles += 1
            verdict.findings += _judge_source(source, label)
    except (OSError, zipfile.BadZipFile, ValueError, EOFError, RuntimeError, struct.error) as e:
        verdict.unreadable = f"{type(e).__name__}: {e}"
    return verdict


def _judge_source(source: PickleSource, label: str) -> list[Finding]:
    where = f"{label} ({source.member})" if source.member else label
    out: list[Finding] = []
    end = source.start
    for i in range(source.count):
        record = record_pickle(source.data, end)
        name = _pickle_name(source, i)
        out += _judge_record(source.data, record, f"{where}, {name}", label, source.torch_loads)
        if record.error:
            out.append(_unloadable(where, name, record, label))
            break
        end = record.end
    trailing = source.data[end : end + 2]
    if source.member is None and source.count == 1 and trailing[:1] == b"\x80":
        record = record_pickle(source.data, end)
        out += _judge_record(source.data, record, f"{where}, a second pickle", label, False)
    return out


def _pickle_name(source: PickleSource, i: int) -> str:
    if source.count == len(LEGACY_PICKLES):
        return f"the {LEGACY_PICKLES[i]} pickle"
    return f"its pickle, which {source.what}" if source.what == PT2_NESTED else "its pickle"


def _judge_record(
    data: Buffer, record: PickleRecord, where: str, label: str, torch_loads: bool, depth: int = 0
) -> list[Finding]:
    out = _code_findings(record, where, label)
    found = refusals(data, record) if torch_loads and depth == 0 else []
    if found:
        first = found[0]
        names = sorted({r.what for r in found if not r.what.isupper()} - {first.what})
        also = f"; it also names {', '.join(names[:6])}" if names else ""
        if any(n.startswith("deepspeed.") for n in [first.what, *names]):
            also += " (DeepSpeed's own load_checkpoint passes weights_only=False)"
        out.append(
            Finding(
                REFUSED,
                "error",
                f"{where}: torch.load(weights_only=True), the default since torch 2.6, "
                f"refuses {first.what} at byte {first.offset} ({first.why}){also}",
                _refusal_hint([r.what for r in found]),
                file=label,
            )
        )
    for offset, inner in record.embedded[:8] if depth < MAX_NESTED else []:
        nested = record_pickle(inner)
        inner_where = f"{where}, a pickle embedded as bytes at byte {offset}"
        out += _judge_record(inner, nested, inner_where, label, False, depth + 1)
    return out


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
        "before torch.load; better, re-save it without those objects (a state_dict of tensors and "
        "plain values), or as safetensors."
    )


def _code_findings(record: PickleRecord, where: str, label: str) -> list[Finding]:
    out: list[Finding] = []
    seen: set[str] = set()
    for ref in record.globals:
        if inert_reason(ref.module, ref.name) is not None or ref.qualified in seen:
            continue
        seen.add(ref.qualified)
        calls = [c for c in record.calls if c.target == ref]
        how = f"{calls[0].opcode} at byte {calls[0].offset}" if calls else "not called"
        does = what_it_does(ref.module, ref.name)
        message = (
            f"{where}: {ref.opcode} at byte {ref.offset} names {ref.qualified} ({how}); "
            f"when unpickled (torch.load(weights_only=False), pickle.load) this {does}"
        )
        out.append(Finding(CODE, "error", message, _CODE_HINT, file=label))
    for call in record.calls:
        if call.on_global_itself and call.target is not None:
            out.append(
                Finding(
                    CODE,
                    "error",
                    f"{where}: {call.opcode} at byte {call.offset} changes "
                    f"{call.target.qualified} itself (patches code of the running process)",
                    _CODE_HINT,
                    file=label,
                )
            )
    for offset, why in record.unresolved:
        out.append(
            Finding(
                CODE,
                "error",
                f"{where}: at byte {offset} {why}; what it runs cannot be known without running it",
                _CODE_HINT,
                file=label,
            )
        )
    return out


def _unloadable(where: str, name: str, record: PickleRecord, label: str) -> Finding:
    return Finding(
        container.RULE,
        "error",
        f"{where}: {name} is not a valid pickle from byte {record.end} ({record.error}): "
        "torch.load and pickle cannot load it",
        "The file is damaged or hand-made; get a fresh copy from its source.",
        file=label,
    )
