"""Python modules in a checkpoint folder that a loader started there would import instead.

``python -c``, ``python -m``, a notebook or a REPL started in a folder put that folder first on
``sys.path``: ``torch.load`` of a pickle naming ``omegaconf.dictconfig.DictConfig`` then
imports ``./omegaconf/`` if the folder holds one, and its code runs, allow-list or not. A
module file, a package (with or without ``__init__``), a compiled module or a ``.pth`` file
with import lines is *shadowing* when its name is that of a module the load imports (named by
a pickle in the scan), of the standard library, of an installed distribution, or of the
libraries checkpoints are loaded with.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from pathlib import Path

from ..io.location import Location, as_location

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
        return name if "." not in name else None
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


def shadowing(folder: Path | Location, imported: set[str]) -> dict[Location, str]:
    """Importable entries of ``folder`` that shadow a module, with the sentence why.

    Args:
        imported: top-level module names the pickles of the scan import.
    """
    out: dict[Location, str] = {}
    folder = as_location(folder)
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return out
    for entry in entries:
        if entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        if entry.is_file() and entry.suffix == ".pth" and _site_pth(entry):
            out[entry] = (
                f"{entry.name} is a site .pth file with import lines: Python runs them when "
                "this folder is a site directory"
            )
            continue
        name = module_name(entry)
        if name is None or (entry.is_dir() and not _is_package_dir(entry)):
            continue
        if name in imported:
            why = f"a pickle in the scan imports {name}"
        elif name in _known_modules():
            why = f"{name} is a module of Python, of an installed package or of a loader"
        else:
            continue
        what = "package" if entry.is_dir() else "module"
        out[entry] = (
            f"{entry.name} is a Python {what} named {name}: a Python started in "
            f"{folder.name or folder}/ (python -c, a notebook) imports it instead of the real "
            f"{name} ({why}), and its code runs"
        )
    return out


def _site_pth(path: Location) -> bool:
    """A text ``.pth`` (not a torch checkpoint) with a line that ``site`` executes."""
    try:
        with path.open("rb") as f:
            head = f.read(65536)
        text = head.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return any(line.startswith(("import ", "import\t")) for line in text.splitlines())


def package_files(entry: Location) -> list[Location]:
    """The files of a shadowing entry (the package's files, or the module file)."""
    if entry.is_file():
        return [entry]
    return sorted(p for p in entry.rglob("*") if p.is_file())
