"""The package's import graph: no cycles between modules or between layers, and every layer
imports only the layers below it (the table in ARCHITECTURE.md).

Every module of ``ckpt_explorer/`` is parsed with ``ast``. An import counts wherever it is
written (a lazy import inside a function is a dependency too); one inside an
``if TYPE_CHECKING:`` block (annotations only) is no dependency for the layer table, but it
closes a module cycle like any other (no cycle at all, even one only annotations make). In a module that calls
``importlib.import_module``, a string that names a module of the package counts as an import of
it. A ``python -m`` target run in a child process
is no import.
``from pkg.sub import name`` depends on ``pkg.sub`` (or on ``pkg.sub.name`` when that is a
module) and on the packages above it (their ``__init__`` runs first) that the importer is not
itself inside.

Layers: each folder (``io/``, ``readers/`` ...) is one layer; each top-level module
(``api.py``, ``view.py``, ``errors.py`` ...) is a layer of its own, named by its module name;
the package's ``__init__.py`` (the public API) and ``__main__.py`` are layers too.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "ckpt_explorer"
ROOT = Path(__file__).resolve().parent.parent.parent / PACKAGE

# Every layer may import these (values, errors and the engines' contracts: progress events,
# cancel flags, the report protocol), importing nothing of the package.
BASE = frozenset({"errors", "types", "contracts"})
# Layer -> the layers it may import (besides itself and BASE). Lowest layers first.
ALLOWED: dict[str, frozenset[str]] = {
    # foundations: plain values, errors, text helpers
    "errors": frozenset(),
    "types": frozenset(),
    "contracts": frozenset(),
    "finding": frozenset(),
    "natural": frozenset(),
    "readable": frozenset(),
    "demo": frozenset(),
    "view": frozenset({"io", "record_table"}),
    "record_table": frozenset({"io"}),
    "json_stream": frozenset({"record_table"}),
    # byte access: local files, pickles, headers; remote byte stores
    "io": frozenset(),
    "remote": frozenset({"view", "io"}),
    "plain": frozenset({"io"}),
    # one module per family, then the registry that detects and composes them
    "readers": frozenset({"view", "record_table", "io"}),
    "formats": frozenset({"view", "io", "readers"}),
    # what each writer's files mean (counters, parts saved, pointers), asked by the rules
    "profiles": frozenset({"view", "io"}),
    # judges of files by content: the security gate, who can load what
    "security": frozenset({"finding", "view", "io", "readers"}),
    "loadable": frozenset({"finding", "io", "remote", "readers", "formats", "security"}),
    # the entry points: detect, open
    "api": frozenset({"view", "io", "remote", "readers", "formats", "loadable"}),
    # engines over views
    "diff": frozenset({"view", "io", "remote", "natural", "plain", "readers", "api"}),
    "fit": frozenset({"view", "record_table", "io", "readable", "readers", "api"}),
    "inspect_report": frozenset(
        {"view", "record_table", "natural", "plain", "readable", "loadable", "fit"}
    ),
    "convert": frozenset(
        {"view", "io", "remote", "natural", "readable", "readers", "api", "diff", "fit"}
    ),
    "validate": frozenset(
        {
            *("finding", "view", "record_table", "io", "readers", "security", "loadable"),
            *("api", "diff", "profiles"),
        }
    ),
    "resume": frozenset({"view", "readable", "readers", "api", "diff", "validate", "profiles"}),
    "timeline": frozenset(
        {"view", "io", "readers", "api", "diff", "validate", "resume", "profiles"}
    ),
    "repair": frozenset({"io", "readers", "loadable", "api"}),
    # faces: the command line, the dashboard, the public API
    "ui": frozenset(
        {
            *("view", "io", "natural", "readable", "plain", "remote", "api", "diff", "fit"),
            *("inspect_report", "timeline", "security", "validate", "resume", "convert"),
            "loadable",
        }
    ),
    "commands": frozenset(
        {
            *("view", "io", "json_stream", "readable", "remote", "formats", "api", "demo"),
            *("diff", "fit"),
            *("inspect_report", "convert", "validate", "resume", "timeline", "security"),
            *("repair", "ui"),
        }
    ),
    "cli": frozenset({"remote", "commands"}),
    "__init__": frozenset({"view", "api", "diff", "validate", "resume", "convert", "ui"}),
    "__main__": frozenset({"cli"}),
}


@dataclass(frozen=True)
class Import:
    source: str  # importing module, e.g. "readers.bundle" ("" for the package itself)
    target: str  # imported module
    where: str  # file:line
    typing_only: bool = False  # written under ``if TYPE_CHECKING:`` (annotations only)

    def __str__(self) -> str:
        return f"{self.where}: {self.source or PACKAGE} imports {self.target or PACKAGE}"


def _modules() -> dict[str, Path]:
    """Dotted name below the package ("" for its ``__init__``) -> file."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in (
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
    )


def _nodes(tree: ast.AST, typing: bool = False) -> list[ast.AST]:
    """Every node, but those under an ``if TYPE_CHECKING:`` body (its ``else`` counts);
    ``typing``: those too."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if _is_type_checking(node) and not typing:
            assert isinstance(node, ast.If)
            todo += node.orelse
        else:
            todo += ast.iter_child_nodes(node)
    return out


def _targets(module: str, node: ast.AST, by_name: bool = False) -> list[str]:
    """Package modules that ``node`` (in ``module``) imports, as names below the package;
    ``by_name``: the module imports by name, so a string naming a module counts."""
    is_package = MODULES[module].name == "__init__.py"
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
        return [n.removeprefix(PACKAGE).lstrip(".") for n in names if n.split(".")[0] == PACKAGE]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".") if module else []
            base = base if is_package else base[:-1]
            base = base[: len(base) - (node.level - 1)]
            stem = ".".join([*base, *([node.module] if node.module else [])])
        elif node.module and node.module.split(".")[0] == PACKAGE:
            stem = node.module.removeprefix(PACKAGE).lstrip(".")
        else:
            return []
        out = []
        for alias in node.names:
            sub = f"{stem}.{alias.name}" if stem else alias.name
            out.append(sub if sub in MODULES else stem)
        return out
    if by_name and isinstance(node, ast.Constant) and isinstance(node.value, str):
        name = node.value
        if name.startswith(PACKAGE + ".") and name.removeprefix(PACKAGE + ".") in MODULES:
            return [name.removeprefix(PACKAGE + ".")]
    return []


def _with_packages(module: str, target: str) -> list[str]:
    """``target`` and the packages above it that ``module`` does not already sit in."""
    parts = target.split(".") if target else []
    chain = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    own = module.split(".") if module else []
    mine = {".".join(own[:i]) for i in range(len(own) + 1)}
    return [t for t in chain if t not in mine] if target else []


def _imports_by_name(nodes: list[ast.AST]) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "import_module" for n in nodes)


def _imports() -> list[Import]:
    """Every import of a package module (the packages above the imported module included)."""
    out: dict[Import, None] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        rel = path.relative_to(ROOT.parent).as_posix()
        nodes = _nodes(tree)
        by_name = _imports_by_name(nodes)
        counted = set(map(id, nodes))
        for node in _nodes(tree, typing=True):
            for target in _targets(module, node, by_name):
                if target == module:
                    continue
                typing_only = id(node) not in counted
                for t in _with_packages(module, target):
                    where = f"{rel}:{getattr(node, 'lineno', 0)}"
                    out[Import(module, t, where, typing_only)] = None
    return list(out)


ALL_IMPORTS = _imports()
# the dependencies the layer table judges: annotation-only imports left out
IMPORTS = [i for i in ALL_IMPORTS if not i.typing_only]


def layer(module: str) -> str:
    """The layer of a module: its folder, or its own name for a top-level module."""
    if module == "":
        return "__init__"
    first = module.split(".")[0]
    return first


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def _explain(groups: list[list[str]], key: Callable[[str], str]) -> str:
    """The imports that close each cycle, three per pair of members."""
    lines = []
    for group in groups:
        members = set(group)
        lines.append(f"cycle through {', '.join(m or PACKAGE for m in group)}:")
        pairs: dict[tuple[str, str], list[Import]] = defaultdict(list)
        for i in ALL_IMPORTS:
            a, b = key(i.source), key(i.target)
            if a != b and a in members and b in members:
                pairs[a, b].append(i)
        for found in pairs.values():
            lines += [f"  {i}" for i in found[:3]]
            lines += [f"  ... and {len(found) - 3} more"] if len(found) > 3 else []
    return "\n".join(lines)


def test_the_parser_counts_lazy_imports_and_skips_type_checking_blocks() -> None:
    snippet = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "from ..io.paths import resolve_inside\n"
        "from . import roles, torch_pickle\n"
        "if TYPE_CHECKING:\n"
        "    from ..api import open_checkpoint\n"
        "else:\n"
        "    import ckpt_explorer.errors\n"
        "def probe(path):\n"
        "    from ..formats.registry import specs\n"
        "    return 'ckpt_explorer.cli'\n"
    )
    found = [t for node in _nodes(snippet) for t in _targets("readers.bundle", node)]
    assert sorted(found) == [
        "errors",
        "formats.registry",
        "io.paths",
        "readers.roles",
        "readers.torch_pickle",
    ]
    assert _with_packages("readers.bundle", "formats.registry") == ["formats", "formats.registry"]
    assert _with_packages("readers.bundle", "readers.roles") == ["readers.roles"]
    typed = [t for node in _nodes(snippet, typing=True) for t in _targets("readers.bundle", node)]
    assert sorted(set(typed) - set(found)) == ["api"]
    by_name = [t for node in _nodes(snippet) for t in _targets("readers.bundle", node, True)]
    assert "cli" in by_name
    # the real graph: formats composes the readers; the dashboard imports the engines itself
    edges = {(i.source, i.target) for i in IMPORTS}
    assert ("formats.training_state", "readers.bundle") in edges
    assert ("ui.job_states", "diff") in edges


def test_every_layer_is_in_the_table() -> None:
    layers = {layer(m) for m in MODULES}
    assert layers <= set(ALLOWED), f"layers missing from ALLOWED: {sorted(layers - set(ALLOWED))}"
    assert set(ALLOWED) <= layers, f"ALLOWED names no layer: {sorted(set(ALLOWED) - layers)}"


def test_the_table_is_a_layering() -> None:
    edges = {a: set(b) for a, b in ALLOWED.items()}
    assert not _cycles(edges), f"ALLOWED has cycles: {_cycles(edges)}"
    assert all(b in ALLOWED for bs in ALLOWED.values() for b in bs)


def test_no_module_cycle() -> None:
    """Annotation-only imports count here: a cycle they close is still two modules that cannot
    be understood one without the other."""
    edges: dict[str, set[str]] = defaultdict(set)
    for i in ALL_IMPORTS:
        edges[i.source].add(i.target)
    groups = _cycles(edges)
    assert not groups, "import cycles between modules:\n" + _explain(groups, str)


def test_no_layer_cycle() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for i in IMPORTS:
        if layer(i.source) != layer(i.target):
            edges[layer(i.source)].add(layer(i.target))
    groups = _cycles(edges)
    assert not groups, "import cycles between layers:\n" + _explain(groups, layer)


def test_every_import_follows_the_table() -> None:
    wrong = [
        str(i)
        for i in IMPORTS
        if layer(i.source) != layer(i.target)
        and layer(i.target) not in BASE
        and layer(i.target) not in ALLOWED.get(layer(i.source), frozenset())
    ]
    assert not wrong, "imports against the layer table (tests/package/test_import_layers.py):\n" + (
        "\n".join(wrong)
    )


def _documented_table() -> dict[str, frozenset[str]]:
    """The layer table of ARCHITECTURE.md: layer -> the layers its row lets it import."""
    text = (ROOT.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    start = text.index("| layer | may import")
    rows = [line for line in text[start:].splitlines() if line.startswith("| ")][1:]
    table: dict[str, frozenset[str]] = {}
    for line in rows:
        if line.startswith("|---"):
            continue
        cells = line.strip("|").split("|")
        allowed = frozenset(re.findall(r"`([\w_]+)`", cells[1]))
        for name in re.findall(r"`([\w_]+)`", cells[0].split("(")[0]):
            table[name] = allowed
    return table


def test_architecture_md_states_the_same_table() -> None:
    documented = _documented_table()
    assert documented == ALLOWED, {
        k: (sorted(documented.get(k, ())), sorted(ALLOWED.get(k, ())))
        for k in set(documented) | set(ALLOWED)
        if documented.get(k) != ALLOWED.get(k)
    }
