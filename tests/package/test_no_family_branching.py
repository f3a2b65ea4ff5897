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
