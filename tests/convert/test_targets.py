"""The conversion target registry (convert/targets.py) is the one place target and writer names
are listed: the planner, the jobs, the CLI's --to choices and the dashboard read it, and no
module tests a target or writer name outside it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import ckpt_explorer
from ckpt_explorer.cli import build_parser
from ckpt_explorer.convert import plan_conversion, run_conversion
from ckpt_explorer.convert.layouts import one_file
from ckpt_explorer.convert.targets import TARGETS, TargetSpec, register_target, target_names
from ckpt_explorer.errors import CkptExplorerError

PACKAGE = Path(ckpt_explorer.__file__).parent
REGISTRY = PACKAGE / "convert" / "targets.py"
NAMES = {"to", "target", "writer"}  # what holds a target or writer name


def _named(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id in NAMES
    return isinstance(node, ast.Attribute) and node.attr in NAMES


def _listed(node: ast.AST) -> bool:
    values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return any(isinstance(v, ast.Constant) and v.value in _registered() for v in values)


def _registered() -> set[str]:
    from ckpt_explorer.convert.targets import WRITERS

    return set(TARGETS) | set(WRITERS)


def name_tests(tree: ast.AST) -> list[int]:
    """Lines comparing a ``to`` / ``target`` / ``writer`` value with a registered name."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_named(s) for s in sides) and any(_listed(s) for s in sides):
                lines.append(node.lineno)
    return lines


def test_no_target_or_writer_name_is_tested_outside_the_registry() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == REGISTRY:
            continue
        for line in name_tests(ast.parse(path.read_text(encoding="utf-8"))):
            found.append(f"{path.relative_to(PACKAGE)}:{line}")
    assert not found, "target/writer names tested outside convert/targets.py: " + ", ".join(found)


def test_the_check_sees_a_name_test() -> None:
    assert name_tests(ast.parse('if to == "dcp": pass\nif pf.writer in ("torch", "x"): pass'))
    assert not name_tests(ast.parse('if to == "nothing-registered": pass'))


def test_cli_choices_and_dashboard_read_the_registry() -> None:
    from ckpt_explorer.ui.job_states import ConvertState

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    convert = sub.choices["convert"]  # type: ignore[index]
    to = next(a for a in convert._actions if a.dest == "to")
    assert list(to.choices) == target_names() == list(TARGETS)
    assert ConvertState.targets(object()) == target_names()  # type: ignore[arg-type]


def test_a_registered_target_is_one_module_and_one_line(tmp_path: Path) -> None:
    """The proof of the extension point: a target registered here (a safetensors file with
    another suffix) plans, writes and verifies through the shared machinery."""
    src = tmp_path / "m.safetensors"
    save_file({"w": torch.arange(12.0).reshape(3, 4)}, src)
    spec = TargetSpec("st-copy", "test only", one_file("safetensors"), suffix=".st")
    register_target(spec)
    try:
        with pytest.raises(ValueError, match="twice"):
            register_target(spec)
        plan = plan_conversion(src, tmp_path / "out.st", "st-copy")
        assert plan.target == "st-copy" and [f.writer for f in plan.files] == ["safetensors"]
        result = run_conversion(plan)
        assert result.verified
        assert torch.equal(load_file(tmp_path / "out.st")["w"], torch.arange(12.0).reshape(3, 4))
    finally:
        del TARGETS["st-copy"]


def test_unknown_target_lists_the_registered_ones(tmp_path: Path) -> None:
    src = tmp_path / "m.safetensors"
    save_file({"w": torch.zeros(2)}, src)
    with pytest.raises(CkptExplorerError) as e:
        plan_conversion(src, tmp_path / "o", "onnx")
    assert all(n in str(e.value) for n in TARGETS)
