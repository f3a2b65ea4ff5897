"""Which llama.cpp reads a GGUF file, decided from the file: its GGUF version, every ggml
type id its tensors use and its ``general.architecture``.

The facts (:mod:`.runtime_facts`) come from git history, not from running llama.cpp: for each
type the first commit that adds ``GGML_TYPE_<NAME> = <id>`` to ggml.h (the ggml repository
keeps the llama.cpp commit's date and pull request when it syncs), and for each architecture
the oldest vendored llama.cpp source seen to name it. A note is
``{"runtime", "reads", "note", "source", "needs"}``: ``needs`` lists what sets the minimum
(what, first date, where from). Given llama.cpp's own git dir the script also records its
first release tag ``bNNNN`` and the note names that build; from the ggml repository (whose tags
start in 2025) the note names the date. Ollama and LM Studio bundle a llama.cpp build, so they read the
file when their build is that recent (unverified).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ...io.gguf_header import GGUFHeader
from . import runtime_facts as facts

RUNTIMES_KEY = "__metadata__.runtimes"  # the view's value: the notes, informational in a diff
SOURCE = f"llama.cpp git history ({facts.SOURCE}: first commit adding each type); unverified here"
REJECTS_V1 = "llama.cpp's gguf reader says 'GGUFv1 is no longer supported'"


def _need(what: str, fact: dict[str, Any]) -> dict[str, Any]:
    tag = fact.get("tag") or ""
    build = tag if re.fullmatch(r"b\d+", tag) else None
    return {"what": what, "since": fact["date"], "build": build, "from": _origin(fact)}


def _since(need: dict[str, Any]) -> str:
    return f"build {need['build']}" if need["build"] else f"llama.cpp of {need['since']}"


def _origin(fact: dict[str, Any]) -> str:
    pull = f"{fact['pull']}, " if fact.get("pull") else ""
    return f"{pull}{facts.SOURCE} {fact['commit']}"


def needs(version: int, type_ids: Iterable[int]) -> list[dict[str, Any]]:
    """What the file needs of llama.cpp, newest first: its GGUF version and each type, with
    the date the support first appears in the history."""
    out = []
    if version in facts.GGUF_VERSIONS:
        out.append(_need(f"GGUF v{version}", facts.GGUF_VERSIONS[version]))
    for tid in sorted(set(type_ids)):
        fact = facts.TYPES.get(tid)
        if fact is not None and "date" in fact:
            out.append(_need(f"type {fact['name']}", fact))
    return sorted(out, key=lambda n: n["since"], reverse=True)


def _unreadable(version: int, type_ids: Iterable[int], arch: str | None) -> str | None:
    if version == 1:
        return f"GGUF v1: {REJECTS_V1}"
    if version > max(facts.GGUF_VERSIONS):
        return f"GGUF v{version}: newer than any version llama.cpp writes (v{max(facts.GGUF_VERSIONS)})"
    unknown = sorted({t for t in type_ids if t not in facts.TYPES})
    if unknown:
        return f"ggml type ids {unknown} are not in llama.cpp's type enum (removed or unknown)"
    if not arch:
        return _arch_note(arch)
    return None


def _arch_note(arch: str | None) -> str:
    if not arch:
        return "no general.architecture: llama.cpp refuses to load the model"
    fact = facts.ARCHES.get(arch)
    if fact is None:
        return f"architecture {arch!r} is not in the llama.cpp sources seen ({facts.SOURCE})"
    return f"architecture {arch!r} is in llama.cpp by commit {fact['by_commit']} ({fact['sdist']})"


def header_notes(header: GGUFHeader) -> list[dict[str, Any]]:
    """The notes for one GGUF header (a split set: the first split's)."""
    return runtime_notes(header.version, (t.ggml_type for t in header.tensors), header.architecture)


def runtime_evidence(notes: list[dict[str, Any]]) -> str:
    """The scan's evidence line: llama.cpp's note."""
    return f"llama.cpp: {notes[0]['note']} (git history; unverified here)"


def runtime_notes(version: int, type_ids: Iterable[int], arch: str | None) -> list[dict[str, Any]]:
    """The llama.cpp, Ollama and LM Studio notes for a GGUF of this version, types and arch."""
    ids = list(type_ids)
    bad = _unreadable(version, ids, arch)
    need = needs(version, ids)
    known_arch = bool(arch) and arch in facts.ARCHES
    if bad:
        reads: bool | None = False
        text = bad
    else:
        reads = True if known_arch else None
        text = (
            f"reads: {'true' if known_arch else 'unknown'} from {_since(need[0])} on "
            f"(newest need: {need[0]['what']}, {need[0]['from']}); {_arch_note(arch)}"
        )
    bundled = (
        f"bundles a llama.cpp build: reads it with one from {_since(need[0])} on"
        if not bad and need
        else f"bundles llama.cpp: {bad or 'no type needs found'}"
    )
    return [
        {"runtime": "llama.cpp", "reads": reads, "note": text, "source": SOURCE, "needs": need},
        *(
            {"runtime": r, "reads": None, "note": f"{bundled}; unverified", "source": SOURCE,
             "needs": need}
            for r in ("Ollama", "LM Studio")
        ),
    ]  # fmt: skip
