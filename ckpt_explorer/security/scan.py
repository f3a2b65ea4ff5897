"""``scan`` and validate's security findings: one verdict for every file under the paths.

Files are judged by content (:func:`.judge.judge_file`); folders add what only they show: the
items of a DCP folder's ``.distcp`` files (located by its ``.metadata``, :mod:`.dcp_items`),
Python modules and site ``.pth`` files (:mod:`.shadowing`: ``unsafe`` when they shadow what the
loads import, else ``code``), configs naming ``trust_remote_code`` modules
(:mod:`.remote_code`: ``code``), a ``.git`` folder's commands and hooks (:mod:`.git_dir`:
``code``), pointer files and links that loaders follow out of the scanned
root (:mod:`.pointers`, :mod:`.tree`: ``unverified``). The gate fails closed: exit 0 only when every file is ``safe`` or
``data`` (``code`` passes with ``allow_code``, ``unverified`` with ``allow_unverified``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..finding import Finding
from ..io.location import Location, as_location
from ..view import CheckpointView
from .chat_templates import TEMPLATE_SUFFIXES, chat_template_findings
from .dcp_items import read_plan
from .git_dir import in_git_dir, judge_git_file
from .judge import (
    CODE,
    CONTAINER,
    SHIPS_CODE,
    UNVERIFIED,
    FileVerdict,
    decide,
    detach,
    file_bytes,
    judge_file,
)
from .onnx_data import explain_external_data
from .pointers import pointers_out
from .remote_code import remote_code
from .severity import weigh_refusals
from .shadowing import FolderCode, folder_code, installed_copy, package_files
from .tree import Link, Tree, walk_paths
from .views import Judged, Scope, judge_region

if TYPE_CHECKING:
    import pandas as pd

_ORDER = {"unsafe": 0, "code": 1, "unverified": 2, "safe": 3, "data": 4}


AnyPath = Path | Location


def _label(path: AnyPath, root: AnyPath | None) -> str:
    if root is None:
        return str(path)
    if root.is_dir():
        try:
            return as_location(path).relative_to(as_location(root)).as_posix()
        except ValueError:
            pass
    return path.name


@dataclass
class ScanReport:
    """One verdict per file, the links met, the paths that could not be read, and timing."""

    verdicts: list[FileVerdict] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    unreadable: list[tuple[AnyPath, str]] = field(default_factory=list)
    allow_unverified: bool = False
    allow_code: bool = False
    seconds: float = 0.0

    @property
    def files_seen(self) -> int:
        return len(self.verdicts)

    def count(self, verdict: str) -> int:
        return sum(v.verdict == verdict for v in self.verdicts)

    @property
    def exit_code(self) -> int:
        """1 when any file is unsafe, code or unverified (code passes with ``allow_code``,
        unverified with ``allow_unverified``), else 2 when a path cannot be read at all, else
        0."""
        if (
            self.count("unsafe")
            or (self.count("code") and not self.allow_code)
            or (self.count("unverified") and not self.allow_unverified)
        ):
            return 1
        return 2 if self.unreadable else 0

    @property
    def nbytes(self) -> int:
        return sum(v.nbytes for v in self.verdicts)

    def to_frame(self) -> pd.DataFrame:
        """One row per file: path, verdict, format, pickles, bytes, the deciding reasons."""
        import pandas as pd

        rows = [
            {"path": str(v.path), "verdict": v.verdict, "format": v.format,
             "pickles": v.pickles, "bytes": v.nbytes, "reasons": "; ".join(v.reasons)}
            for v in self.verdicts
        ]  # fmt: skip
        return pd.DataFrame(
            rows, columns=["path", "verdict", "format", "pickles", "bytes", "reasons"]
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "files_seen": self.files_seen,
            "counts": {k: self.count(k) for k in _ORDER},
            "unsafe": self.count("unsafe"),
            "allow_unverified": self.allow_unverified,
            "allow_code": self.allow_code,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3),
            "files": [
                {
                    "path": str(v.path),
                    "verdict": v.verdict,
                    "format": v.format,
                    "pickles": v.pickles,
                    "reasons": v.reasons,
                    "findings": [f.to_dict() for f in v.findings],
                }
                for v in self.verdicts
            ],
            "links": [
                {"path": str(x.path), "target": x.target, "status": x.status} for x in self.links
            ],
            "unreadable": [{"path": str(p), "why": why} for p, why in self.unreadable],
        }


def scan_paths(
    paths: list[str | Path | Location],
    *,
    allow_unverified: bool = False,
    allow_code: bool = False,
    root: AnyPath | None = None,
) -> ScanReport:
    """Judge every file under ``paths`` (folders recursively); header-only.

    Args:
        root: label files relative to this folder (or by name, for a file); default: their
            paths as given.
    """
    start = time.perf_counter()
    given = [p if isinstance(p, Location) else Path(p) for p in paths]
    tree = walk_paths(given)
    report = ScanReport(
        links=tree.links,
        unreadable=tree.missing,
        allow_unverified=allow_unverified,
        allow_code=allow_code,
    )
    by_path = _dcp_verdicts(tree, root)
    for path in tree.files:
        if path not in by_path:
            by_path[path] = judge_file(path, _label(path, root))
    for path, why in tree.odd:
        v = FileVerdict(path, _label(path, root))
        decide(v, Judged(), [], [f"{v.label}: {why}"])
        by_path[path] = v
    for link in tree.links:
        if link.status == "outside":
            v = FileVerdict(link.path, _label(link.path, root))
            decide(
                v,
                Judged(),
                [],
                [
                    f"{v.label}: a link to {link.target}, outside the scanned folder: a loader that "
                    "opens it reads a file this scan did not judge (scan the target itself)"
                ],
            )
            by_path[link.path] = v
    _folder_code(tree, by_path, root, [p for p in given if isinstance(p, Path) and p.is_dir()])
    _remote_code(tree, by_path)
    _chat_templates(tree, by_path)
    _git_code(tree, by_path)
    _pointers(tree, by_path, _roots(given))
    explain_external_data(by_path)
    report.verdicts = sorted(by_path.values(), key=lambda v: str(v.path))
    report.seconds = time.perf_counter() - start
    return report


def _dcp_verdicts(tree: Tree, root: AnyPath | None) -> dict[AnyPath, FileVerdict]:
    """Verdicts of DCP folders' files: ``.metadata`` first, then each ``.distcp`` it names,
    with every item judged as the file DCP's reader ``torch.load``s."""
    out: dict[AnyPath, FileVerdict] = {}
    files = set(tree.files)
    for meta in [p for p in tree.files if p.name == ".metadata"]:
        mv = out[meta] = judge_file(meta, _label(meta, root))
        if mv.verdict != "safe":
            continue  # its items are not located: each data file is judged on its own
        plan = read_plan(meta)
        if plan.doubts:
            _add(mv, UNVERIFIED, [f"{mv.label}: {d}" for d in plan.doubts])
        for rel, items in plan.items.items():
            path = meta.parent / rel
            if path in files:
                label = _label(path, root)
                out[path] = judge_file(
                    path, label, extra=_items(path, label, items), explained=True
                )
    return out


def _items(path: AnyPath, label: str, items: list[tuple[int, int, str]]) -> Judged:
    """The judged items of one ``.distcp`` file (findings taken while it is mapped)."""
    out = Judged()
    try:
        size = path.stat().st_size
        with file_bytes(path, size) as mm:
            scope = Scope()
            for offset, length, what in sorted(items):
                if offset < 0 or length < 0 or offset + length > size:
                    out.notes.append(f"{label}: {what} at byte {offset} lies past the end")
                    continue
                where = f"{label} ({what}, bytes {offset}-{offset + length})"
                out.add(detach(judge_region(mm, offset, offset + length, where, scope, 1)))
    except (OSError, ValueError) as e:
        out.doubts.append(f"{label}: its DCP items cannot be read ({e})")
    return out


def _add(v: FileVerdict, rule: str, messages: list[str]) -> None:
    hint = next((f.hint for f in v.findings if f.rule == rule), "")
    v.findings += [Finding(rule, "error", m, hint, file=v.label) for m in messages]
    if rule == CODE:
        v.verdict = "unsafe"
    elif rule == SHIPS_CODE:
        if v.verdict != "unsafe":
            v.verdict = "code"
    elif v.verdict not in ("unsafe", "code"):
        v.verdict = "unverified"


def _add_code_and_doubts(v: FileVerdict, code: list[str], doubts: list[str]) -> None:
    """A folder step's findings on one file: code it ships, then what it could not prove."""
    if code:
        _add(v, SHIPS_CODE, code)
    if doubts:
        _add(v, UNVERIFIED, doubts)


def _verdict(
    by_path: dict[AnyPath, FileVerdict], path: AnyPath, root: AnyPath | None
) -> FileVerdict:
    v = by_path.get(path)
    if v is None:
        v = by_path[path] = judge_file(path, _label(path, root))
    return v


def _folder_code(
    tree: Tree,
    by_path: dict[AnyPath, FileVerdict],
    root: AnyPath | None,
    scanned_dirs: Sequence[Path] = (),
) -> None:
    """Python modules, packages and site ``.pth`` files in the scanned folders: ``unsafe``
    when they shadow what the loads import (and so are the pickles importing them), else
    ``code``. Shadowing reaches files beside a file scanned alone; code only files scanned.
    Every folder of a scanned tree counts, also one holding only folders: a Python started
    there loads ``run/iter_4.pth`` with ``./mmengine/`` first on its path."""
    imported = set().union(*(v.imports for v in by_path.values())) if by_path else set()
    modules = set().union(*(v.modules for v in by_path.values())) if by_path else set()
    folders = {p.parent for p in tree.files}
    for top in scanned_dirs:
        for f in list(folders):
            if isinstance(f, Path):
                folders |= {a for a in f.parents if a == top or top in a.parents}
    for folder in sorted(folders, key=str):
        for found in folder_code(folder, imported, by_path, modules):
            if found.shadows:
                _shadowing(found, folder, by_path, root)
            elif found.installed:
                v = by_path.get(found.entry)
                if v is not None:
                    v.findings.append(Finding(CONTAINER, "info", f"{v.label}: {found.why}", ""))
            else:
                for f in package_files(found.entry, modules_only=True):
                    v = by_path.get(f)
                    if v is None or installed_copy(f):
                        continue
                    if not any(x.rule == SHIPS_CODE for x in v.findings):  # said by a parent
                        _add(v, SHIPS_CODE, [f"{v.label}: {found.why}"])


def _shadowing(
    found: FolderCode, folder: AnyPath, by_path: dict[AnyPath, FileVerdict], root: AnyPath | None
) -> None:
    """A shadowing module's files, and the pickles in its folder or below it that import it
    (a Python started in that folder loads them by relative path): unsafe."""
    entry = found.entry
    name = entry.name.split(".")[0] if entry.is_file() else entry.name
    for f in package_files(entry, modules_only=True) or [entry]:  # data files run nothing
        v = _verdict(by_path, f, root)
        _add(v, CODE, [f"{v.label}: {found.why}"])
    for v in by_path.values():
        if name in v.imports and folder in v.path.parents:
            _add(
                v,
                CODE,
                [
                    f"{v.label}: imports {name}, which {entry.name} in {folder.name or folder}/ "
                    "shadows: loading it from that folder runs that code"
                ],
            )


def _remote_code(tree: Tree, by_path: dict[AnyPath, FileVerdict]) -> None:
    """Configs whose ``auto_map``, ``custom_pipelines`` (or diffusers' ``model_index.json``)
    name code that ``from_pretrained`` / ``pipeline(trust_remote_code=True)`` imports: the
    config and the module are code."""
    for path in tree.files:
        if not path.name.endswith(".json") or path not in by_path:
            continue
        for ref in remote_code(as_location(path)):
            v = by_path[path]
            _add(v, UNVERIFIED if ref.unread else SHIPS_CODE, [ref.message(v.label)])
            module = by_path.get(path.parent / ref.module) if ref.present else None
            if module is not None:
                _add(
                    module,
                    SHIPS_CODE,
                    [
                        f"{module.label}: {path.name}'s {ref.key} names it: "
                        f"{ref.loader}(trust_remote_code=True) imports it and runs its code"
                    ],
                )


def _chat_templates(tree: Tree, by_path: dict[AnyPath, FileVerdict]) -> None:
    """Chat templates that reach Python internals (code) or read names they build
    (unverified): in tokenizer configs, ``.jinja`` files and GGUF metadata."""
    for path in tree.files:
        v = by_path.get(path)
        if v is None or not path.name.endswith(TEMPLATE_SUFFIXES):
            continue
        found = chat_template_findings(as_location(path), v.label)
        _add_code_and_doubts(v, found.code, found.doubts)


def _git_code(tree: Tree, by_path: dict[AnyPath, FileVerdict]) -> None:
    """A ``.git`` folder's config keys and hooks that git runs as commands: code."""
    for path in tree.files:
        v = by_path.get(path)
        if v is None or not in_git_dir(as_location(path)):
            continue
        found = judge_git_file(as_location(path), v.label)
        _add_code_and_doubts(v, found.code, found.doubts)


def _pointers(tree: Tree, by_path: dict[AnyPath, FileVerdict], roots: list[str]) -> None:
    """Pointer files whose loader follows them out of the scanned folder: unverified."""
    for path in tree.files:
        if isinstance(path, Path) and path in by_path:
            found = pointers_out(path, roots)
            if found:
                v = by_path[path]
                _add(v, UNVERIFIED, [p.message(v.label) for p in found])


def _roots(paths: list[Path | Location]) -> list[str]:
    """The real paths pointers must stay inside: each folder given (a file's own folder)."""
    out = []
    for p in paths:
        local = p.local_path() if isinstance(p, Location) else p
        if local is not None:
            real = os.path.realpath(local)
            out.append(real if os.path.isdir(real) else os.path.dirname(real))
    return out


def security_findings(root: str | Path | Location) -> list[Finding]:
    """Every ``security.*`` finding for a checkpoint file, or every file under a folder."""
    where: AnyPath = root if isinstance(root, Location) else Path(root)
    local = as_location(where).local_path()
    where = local if local is not None else where
    return [f for v in scan_paths([where], root=where).verdicts for f in v.findings]


def view_security_findings(view: CheckpointView) -> list[Finding]:
    """:func:`security_findings` of an opened checkpoint, weighed by each file's role (a
    refusal by torch's defaults is an error for weights, info for other training-state
    parts): what validate reports and the dashboard's banner shows."""
    return weigh_refusals(security_findings(view.path), view)


def unsafe_paths(root: str | Path) -> set[AnyPath]:
    """Files under ``root`` that are unsafe, code or unverified, and the folders holding them."""
    root = Path(root)
    out: set[AnyPath] = set()
    for verdict in scan_paths([root]).verdicts:
        if verdict.verdict in ("unsafe", "code", "unverified"):
            out.add(verdict.path)
            out.update(p for p in verdict.path.parents if p == root or root in p.parents)
    return out


__all__ = [
    "ScanReport",
    "scan_paths",
    "security_findings",
    "unsafe_paths",
    "view_security_findings",
]
