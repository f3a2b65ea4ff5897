"""The table of byte loaders (security/byte_loaders.py) derived again from the installed sources.

Every module of the installed torch, numpy, pandas and joblib is parsed (``ast``, nothing of
them run by the finder); a module-level function is a byte loader when it passes one of its
parameters, or a value made from one, to ``pickle.load``/``loads``/``Unpickler`` (or a subclass
of it), ``torch.load``, ``numpy.load``, ``marshal.loads``, joblib's or pandas' loaders, or to a
function found so (to a fixed point). Each one, under every name a pickle could give it (an
attribute of an imported module that *is* the function), is in the table or not allow-listed.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

from ckpt_explorer.security.byte_loaders import BYTE_LOADERS, CALLS_ARGUMENT
from ckpt_explorer.security.inert import inert_reason

PACKAGES = ("torch", "numpy", "pandas", "joblib")
_LOADER_MODULES = {
    "pickle",
    "_pickle",
    "cPickle",
    "marshal",
    "torch",
    "numpy",
    "joblib",
    "pandas",
    "dill",
    "cloudpickle",
    "torch.serialization",
}
_LOAD_NAMES = {"load", "loads", "_loads", "_load", "Unpickler", "_Unpickler", "read_pickle"}
_KEYWORDS = (b"pickle", b"marshal", b"load", b"Unpickler")


def _dotted(node: ast.AST) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _aliases(tree: ast.Module, module: str) -> dict[str, str]:
    """Local name -> qualified name, for imports and the module's own functions/classes."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            out.setdefault(node.name, f"{module}.{node.name}")
    return out


def _tainted(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The parameters and every name bound from an expression that uses one."""
    a = fn.args
    out = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
    out |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    out.discard("pickle_module")
    changed = True
    while changed:
        changed = False
        for node in ast.walk(fn):
            pairs: list[tuple[ast.AST, ast.AST]] = []
            if isinstance(node, ast.Assign):
                pairs = [(t, node.value) for t in node.targets]
            elif isinstance(node, ast.AnnAssign | ast.AugAssign) and node.value is not None:
                pairs = [(node.target, node.value)]
            elif isinstance(node, ast.With | ast.AsyncWith):
                pairs = [(i.optional_vars, i.context_expr) for i in node.items if i.optional_vars]
            for target, value in pairs:
                new = _names(target) - out if _names(value) & out else set()
                if new:
                    out |= new
                    changed = True
    return out


def _calls(module: str, tree: ast.Module) -> tuple[dict[str, list[list[str]]], set[str]]:
    """Per module-level function: the dotted callees it passes a tainted value to (resolved
    through the imports); and the module's Unpickler subclasses (nested ones too)."""
    alias = _aliases(tree, module)
    subclasses = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                d = _dotted(base)
                if d and d[-1] in ("Unpickler", "_Unpickler"):
                    subclasses.add(node.name)
    out: dict[str, list[list[str]]] = {}
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        tainted = _tainted(fn)
        found = []
        for call in ast.walk(fn):
            if not isinstance(call, ast.Call):
                continue
            d = _dotted(call.func)
            args = [*call.args, *(k.value for k in call.keywords)]
            if d and any(_names(x) & tainted for x in args):
                if d[0] in subclasses and len(d) == 1:
                    d = ["pickle", "Unpickler"]
                found.append([alias.get(d[0], d[0]), *d[1:]])
        out[f"{module}.{fn.name}"] = found
    return out, {f"{module}.{c}" for c in subclasses}


def _is_loader(callee: list[str], known: set[str]) -> bool:
    full = ".".join(callee)
    if full in known:
        return True
    parts = full.split(".")
    base = ".".join(parts[:-1])
    return parts[-1] in _LOAD_NAMES and (base in _LOADER_MODULES or parts[0] == "pickle_module")


def find_byte_loaders(site: Path) -> set[str]:
    """Qualified names of the module-level functions of PACKAGES that load bytes or a file,
    and of their Unpickler subclasses."""
    calls: dict[str, list[list[str]]] = {}
    known: set[str] = set()
    for pkg in PACKAGES:
        for path in sorted((site / pkg).rglob("*.py")):
            raw = path.read_bytes()
            if not any(k in raw for k in _KEYWORDS):
                continue
            try:
                tree = ast.parse(raw)
            except SyntaxError:
                continue
            module = ".".join(path.relative_to(site).with_suffix("").parts)
            module = module.removesuffix(".__init__")
            fns, subclasses = _calls(module, tree)
            calls.update(fns)
            known |= subclasses
    found: set[str] = set()
    while True:
        new = {
            name
            for name, callees in calls.items()
            if name not in found and any(_is_loader(c, known | found) for c in callees)
        }
        if not new:
            return found | known  # the Unpickler subclasses load too
        found |= new


def _is_test(name: str) -> bool:
    return ".tests." in name or ".test." in name or "testing" in name


def _public_names(found: set[str]) -> dict[str, set[str]]:
    """Each found function -> its own name and every ``module.attr`` of an imported module of
    PACKAGES that is it (test modules and modules that do not import here: their own name)."""
    out: dict[str, set[str]] = {name: {name} for name in found}
    objects = {}
    for name in found:
        module, attr = name.rsplit(".", 1)
        if _is_test(name):
            continue
        try:
            objects[name] = getattr(importlib.import_module(module), attr)
        except Exception:  # an optional dependency missing: the name itself is checked
            continue
    by_id = {id(obj): name for name, obj in objects.items()}
    for modname, mod in list(sys.modules.items()):
        if modname.split(".")[0] not in PACKAGES or mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            name = by_id.get(id(value))
            if name is not None and objects[name] is value:
                out[name].add(f"{modname}.{attr}")
    return out


@pytest.fixture(scope="module")
def found() -> set[str]:
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None
    return find_byte_loaders(Path(spec.origin).parent.parent)


def test_the_finder_finds_the_loaders_users_know(found: set[str]) -> None:
    for name in (
        "torch.storage._load_from_bytes",
        "torch.serialization.load",
        "numpy.lib._npyio_impl.load",
        "pandas.io.pickle.read_pickle",
        "pandas.compat.pickle_compat.loads",
        "joblib.numpy_pickle.load",
    ):
        assert name in found, name


def test_every_loader_found_is_in_the_table_or_not_allow_listed(found: set[str]) -> None:
    import joblib  # noqa: F401  (their public names: torch.load, numpy.load, pandas.read_pickle)
    import numpy  # noqa: F401
    import pandas  # noqa: F401
    import torch  # noqa: F401

    inert = []
    for name, aliases in _public_names(found).items():
        for alias in aliases:
            module, attr = alias.rsplit(".", 1)
            if alias not in BYTE_LOADERS and inert_reason(module, attr) is not None:
                inert.append(f"{alias} (is {name})")
    assert not inert, inert
    public = {a for names in _public_names(found).values() for a in names}
    assert {"torch.load", "numpy.load", "pandas.read_pickle", "joblib.load"} <= public
    listed = {n for n in BYTE_LOADERS if n.split(".")[0] in PACKAGES}
    assert listed <= public | found, listed - public - found  # the table is what was found


def test_the_table_names_what_the_installed_libraries_define() -> None:
    """Every torch/numpy/pandas/joblib entry of the tables resolves to an installed function."""
    missing = []
    for name in [*BYTE_LOADERS, *CALLS_ARGUMENT]:
        module, attr = name.rsplit(".", 1)
        if module.split(".")[0] not in PACKAGES:
            continue
        try:
            getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            missing.append(name)
    assert not missing, missing
