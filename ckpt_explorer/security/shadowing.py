"""Python code in a checkpoint folder that a Python started there imports or runs.

``python -c``, ``python -m``, a notebook or a REPL started in a folder put that folder first on
``sys.path``: ``torch.load`` of a pickle naming ``omegaconf.dictconfig.DictConfig`` then
imports ``./omegaconf/`` if the folder holds one, and its code runs, allow-list or not. A
module file, a package (with or without ``__init__``) or a compiled module is *shadowing*
(verdict ``unsafe``: a plain load runs it) when its name is that of a module the load imports
(named by a pickle in the scan), of the standard library, of an installed distribution, or of
the libraries checkpoints are loaded with. A folder without ``__init__`` is a namespace portion,
as Python's path finder reads it: a regular package or module of that name anywhere on
``sys.path`` wins over it, and where none exists it runs only the module files an import names
by their dotted path; so it shadows only when it holds a module file on the path of a module the
pickles import (``mmengine/logging/history_buffer.py`` for ``mmengine.logging.history_buffer``),
never by its name alone. Every other importable entry is code all the same
(verdict ``code``): named after what a library tries to import at start-up
(:mod:`.startup_imports`), it runs when that library is imported there; else it runs when
anything imports it. A ``.pth`` file with a line ``site`` executes (:mod:`.site_pth`) is code
too: it runs in every Python whose site directory holds it.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from collections.abc import Container
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..io.location import Location, as_location
from .known_scripts import released_copy
from .site_pth import PthLine, exec_line
from .startup_imports import STARTUP_IMPORTS

_SUFFIXES = (".py", ".pyc", ".pyw", ".pyd", ".so")
_EXT = re.compile(r"^(?P<name>[^.]+)\.(?:cpython|abi3|pypy)[^/]*\.(?:so|pyd)$")
# loaders and what they import, whether installed here or not
_LOADER_MODULES = frozenset({
    "torch", "numpy", "safetensors", "transformers", "accelerate", "deepspeed", "colossalai",
    "megatron", "omegaconf", "hydra", "lightning", "pytorch_lightning", "joblib", "sklearn",
    "scipy", "pandas", "peft", "diffusers", "trl", "tokenizers", "huggingface_hub", "yaml",
    "tqdm", "packaging", "filelock", "typing_extensions", "sympy", "networkx", "jinja2",
    "fsspec", "pickle", "dill", "cloudpickle", "einops", "timm", "torchvision", "nemo",
})  # fmt: skip


@functools.cache
def _known_modules() -> frozenset[str]:
    import importlib.metadata

    names = set(getattr(sys, "stdlib_module_names", ())) | set(sys.builtin_module_names)
    with contextlib.suppress(Exception):  # broken distribution metadata must not stop a scan
        names |= set(importlib.metadata.packages_distributions())
    return frozenset(names | _LOADER_MODULES)


def module_name(entry: Location) -> str | None:
    """The module name ``import`` would find ``entry`` under, or None."""
    name = entry.name
    if entry.is_dir():
        return name if name.isidentifier() else None
    m = _EXT.match(name)
    if m:
        return m.group("name")
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return None


def _is_package_dir(d: Location) -> bool:
    """A folder an import can run code from: it holds a module file at some depth (with
    ``__init__`` it is a package; without, a namespace package where the real one is missing)."""
    try:
        for i, p in enumerate(d.rglob("*")):
            if i > 10_000:
                return True  # too big to rule out: treated as a package
            if p.is_file() and module_name(p) is not None:
                return True
    except OSError:
        return True
    return False


@dataclass(frozen=True)
class FolderCode:
    """An importable entry of a folder (or a ``.pth`` with a line ``site`` runs): whether it
    shadows what a load imports (code runs on a plain load), and the sentence why."""

    entry: Location
    shadows: bool
    why: str
    installed: bool = False  # byte for byte a file of an installed distribution: no new code


# scripts that a library copies beside its checkpoints, by name -> (distribution, its path)
_COPIED_SCRIPTS = {
    "zero_to_fp32.py": ("DeepSpeed", "deepspeed/utils/zero_to_fp32.py"),
    "zero_to_torch.py": ("DeepSpeed", "deepspeed/utils/zero_to_torch.py"),
}


@functools.cache
def _installed_digest(rel: str) -> str | None:
    import hashlib
    import sysconfig

    for key in ("purelib", "platlib"):  # the interpreter's own site-packages, not sys.path
        path = Path(sysconfig.get_paths()[key]) / rel
        with contextlib.suppress(OSError):
            return hashlib.sha256(path.read_bytes()).hexdigest()
    return None


def installed_copy(entry: Location) -> str:
    """How ``entry`` is a byte-identical copy of a script a library writes beside its
    checkpoints (DeepSpeed's ``zero_to_fp32.py``: the installed one's, or a release's, see
    :mod:`.known_scripts`), or "": such a copy adds no code that its library did not publish
    (other content under that name is judged as code)."""
    import hashlib

    known = _COPIED_SCRIPTS.get(entry.name)
    if known is None or not entry.is_file():
        return ""
    try:
        digest = hashlib.sha256(entry.read_bytes()).hexdigest()
    except OSError:
        return ""
    if digest == _installed_digest(known[1]):
        return f"byte for byte the installed {known[0]}'s {known[1]}, which it copies beside its checkpoints"
    release = released_copy(entry.name, digest)
    if release:
        return f"byte for byte {release}'s {known[1]}, which it copies beside its checkpoints"
    return ""


def _module_file(d: Location, name: str) -> Location | None:
    """What an import of submodule ``name`` runs code from in folder ``d``: a module file
    (``name.py`` or another module suffix) or a package (``name/`` with ``__init__``), else
    None (a namespace folder or nothing)."""
    try:
        entries = list(d.iterdir())
    except OSError:
        return None
    for p in entries:
        if p.is_file() and module_name(p) == name:
            return p
        if p.is_dir() and p.name == name and _has_init(p):
            return p
    return None


def namespace_runs(entry: Location, modules: set[str]) -> list[str]:
    """The imported dotted names whose import would run a module file of the namespace folder
    ``entry`` (where no regular package of its name is installed), each with that file."""
    out = []
    for module in sorted(modules):
        parts = module.split(".")
        if parts[0] != entry.name or len(parts) < 2:
            continue
        d: Location | None = entry
        for part in parts[1:]:
            if d is None:
                break
            found = _module_file(d, part)
            if found is not None:
                out.append(f"{module} ({found.name})")
                break
            sub = d / part
            d = sub if sub.is_dir() else None
    return out


def folder_code(
    folder: Path | Location,
    imported: set[str],
    scanned: Container[Any] = (),
    modules: set[str] | None = None,
) -> list[FolderCode]:
    """Every entry of ``folder`` that Python imports or runs when found, with the sentence why.

    Args:
        imported: top-level module names the pickles of the scan import.
        scanned: the files of the scan: only their ``.pth`` files are read (each one whole).
        modules: the full dotted names the pickles import (for namespace folders; without
            them, ``imported`` names are taken as imported whole).
    """
    out: list[FolderCode] = []
    folder = as_location(folder)
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return out
    where = f"{folder.name or folder}/"
    for entry in entries:
        if entry.name.endswith(".pth"):  # site takes any such name, ".pth" itself too
            line = exec_line(entry) if entry in scanned and entry.is_file() else None
            if line is not None:
                out.append(FolderCode(entry, False, _pth_why(entry, line)))
            continue
        if entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        name = module_name(entry)
        if name is None or (entry.is_dir() and not _is_package_dir(entry)):
            continue
        what = "package" if entry.is_dir() else "module"
        same = installed_copy(entry)
        if same:
            out.append(FolderCode(entry, False, f"{entry.name} is {same}", installed=True))
            continue
        if entry.is_dir() and not _has_init(entry):
            runs = namespace_runs(entry, modules if modules is not None else set())
            if runs:
                out.append(
                    FolderCode(
                        entry,
                        True,
                        f"{entry.name} is a folder without __init__ (a namespace package): where "
                        f"no package {name} is installed, a Python started in {where} imports "
                        f"{'; '.join(runs[:3])} from it when a pickle in the scan is loaded, "
                        "and its code runs",
                    )
                )
            continue  # a namespace folder runs nothing by its name alone
        if name in imported:
            why = f"a pickle in the scan imports {name}"
        elif name in _known_modules():
            why = f"{name} is a module of Python, of an installed package or of a loader"
        else:
            out.append(FolderCode(entry, False, _code_why(entry, name, what, where)))
            continue
        out.append(
            FolderCode(
                entry,
                True,
                f"{entry.name} is a Python {what} named {name}: a Python started in {where} "
                f"(python -c, a notebook) imports it instead of the real {name} ({why}), and its "
                "code runs",
            )
        )
    return out


def _has_init(d: Location) -> bool:
    try:
        return any(module_name(p) == "__init__" for p in d.iterdir() if p.is_file())
    except OSError:
        return True


def shadowing(folder: Path | Location, imported: set[str]) -> dict[Location, str]:
    """Importable entries of ``folder`` that shadow a module, with the sentence why."""
    return {c.entry: c.why for c in folder_code(folder, imported) if c.shadows}


def _code_why(entry: Location, name: str, what: str, where: str) -> str:
    libs = [lib for lib, names in STARTUP_IMPORTS.items() if name in names]
    if libs:
        named = [f"`import {lib}`" for lib in libs[:3]]
        tries = (
            f"{', '.join(named[:-1])} and {named[-1]} try"
            if len(named) > 1
            else f"{named[0]} tries"
        )
        return (
            f"{entry.name} is a Python {what} named {name}: {tries} `import {name}` at "
            f"start-up, so a Python started in {where} that imports {libs[0]} runs it"
        )
    return (
        f"{entry.name} is a Python {what}: a Python started in {where} (python -c, a "
        f"notebook) can import it as {name}, and its code runs then"
    )


def _pth_why(entry: Location, line: PthLine) -> str:
    return (
        f"{entry.name} is a .pth file with a line Python's site module executes "
        f"({line.text!r}, at byte {line.offset}; {line.when}) when this folder is a site "
        "directory (copied into site-packages or a venv, or given to site.addsitedir)"
    )


def package_files(entry: Location, modules_only: bool = False) -> list[Location]:
    """The files of an entry (the package's files, or the module file itself); with
    ``modules_only``, a package's module files alone."""
    if entry.is_file():
        return [entry]
    files = sorted(p for p in entry.rglob("*") if p.is_file())
    return [p for p in files if module_name(p) is not None] if modules_only else files
