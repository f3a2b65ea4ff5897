"""Consumers act on what the readers decided (``view.traits``, ``view.state_map``, a part's
kind), never on family ids or detail strings: those are for people to read. Only the readers
and the format registry, which decide them, may compare them."""

from __future__ import annotations

import ast
from pathlib import Path

import ckpt_explorer

PACKAGE = Path(ckpt_explorer.__file__).parent
DECIDERS = ("readers", "formats")
WORDS = {"family", "detail"}
DETECTIONS = {"detection", "det", "d"}  # what holds a Detection's ``detail``
TESTS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _is_word(node: ast.AST) -> bool:
    """``x.family``, ``x.detection.detail`` / ``det.detail``, or a bare ``family`` /
    ``detail`` name (other ``detail`` attributes, a panel's say, are not a Detection's)."""
    if isinstance(node, ast.Attribute) and node.attr == "family":
        return True
    if isinstance(node, ast.Attribute) and node.attr == "detail":
        owner = node.value
        name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        return name in DETECTIONS
    return isinstance(node, ast.Name) and node.id in WORDS


def branchings(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, code) of each comparison, membership test, prefix test or lookup on a family or
    detail string."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            tested = any(isinstance(op, TESTS) for op in node.ops)
            if tested and any(_is_word(n) for n in [node.left, *node.comparators]):
                found.append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func.attr
            if method in ("startswith", "endswith", "get") and (
                _is_word(node.func.value)
                if method != "get"
                else any(_is_word(a) for a in node.args)
            ):
                found.append(node)
        elif (isinstance(node, ast.Subscript) and _is_word(node.slice)) or (
            isinstance(node, ast.Match) and _is_word(node.subject)
        ):
            found.append(node)
    return sorted((n.lineno, ast.unparse(n)) for n in found if hasattr(n, "lineno"))


def test_the_guard_sees_each_way_of_branching() -> None:
    code = """
if view.family == "torch-dcp": pass
if "DeepSpeed" in view.detection.detail: pass
if det.family.startswith("torch"): pass
kind = KIND[det.family]
kind = KIND.get(det.family, "")
if family in ("a", "b"): pass
shown = f"{view.family} ({view.detection.detail})"
row = [p.family, p.kind]
if self.detail is not None and view.family is not None: pass
"""
    hits = branchings(ast.parse(code))
    assert [line for line, _ in hits] == [2, 3, 4, 5, 6, 7]


def test_no_consumer_branches_on_family_or_detail() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in DECIDERS:
            continue
        for line, code in branchings(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"{rel}:{line}: {code}")
    assert not offenders, "ask view.traits / view.state_map instead:\n" + "\n".join(offenders)


# ---- conversion targets, writers and store protocols: asked of their registries ----------------
# A conversion target or file writer is a TargetSpec's (convert/targets.py); a URL scheme is a
# StoreSpec's (remote/registry.py, remote/stores.py). Elsewhere code asks the spec, never
# compares the name.
TARGET_NAMES = {"safetensors", "bin", "hf", "torch", "dcp"}
TARGET_WORDS = {"to", "target", "writer"}
PROTOCOLS = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "http", "https", "hf", "file"}
PROTOCOL_WORDS = {"proto", "protocol", "scheme", "sch"}
REGISTRIES = {"convert/targets.py", "remote/registry.py", "remote/stores.py"}


def _word(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _strings(node: ast.AST) -> set[str]:
    return {
        c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)
    }


def name_branchings(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, code, what) of each comparison of a target / writer name or a URL scheme with a
    literal one, and each ``.startswith("http")``-style test of a scheme."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, TESTS) for op in node.ops):
            sides = [node.left, *node.comparators]
            words = {_word(s) for s in sides}
            literals = set().union(*(_strings(s) for s in sides if _word(s) is None))
            if words & TARGET_WORDS and literals & TARGET_NAMES:
                found.append((node.lineno, ast.unparse(node), "target"))
            elif words & PROTOCOL_WORDS and literals & PROTOCOLS:
                found.append((node.lineno, ast.unparse(node), "protocol"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and _word(node.func.value) in PROTOCOL_WORDS
            and any(_strings(a) & PROTOCOLS for a in node.args)
        ):
            found.append((node.lineno, ast.unparse(node), "protocol"))
    return sorted(found)


def test_the_guard_sees_target_writer_and_protocol_branches() -> None:
    code = """
if to == "dcp": pass
if pf.writer != "safetensors": pass
if plan.target in ("torch", "bin"): pass
if self.protocol in ("s3", "s3a"): pass
if proto.startswith("http"): pass
if scheme == "gs": pass
if to == other_to: pass
if target in TARGETS: pass
if kind == "hf": pass
"""
    hits = name_branchings(ast.parse(code))
    assert [(line, what) for line, _, what in hits] == [
        (2, "target"),
        (3, "target"),
        (4, "target"),
        (5, "protocol"),
        (6, "protocol"),
        (7, "protocol"),
    ]


def test_no_target_writer_or_protocol_branch_outside_the_registries() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in REGISTRIES:
            continue
        for line, code, _what in name_branchings(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"{rel}:{line}: {code}")
    assert not offenders, "ask the TargetSpec / StoreSpec instead:\n" + "\n".join(offenders)
