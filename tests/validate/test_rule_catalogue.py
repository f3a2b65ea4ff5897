"""The rule catalogue (validate/catalogue.py) is the one list of rule ids: every id written in
the package is catalogued, every catalogued id is written somewhere, a literal severity is one
the catalogue allows, and README's rule table is the generated one."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from ckpt_explorer.validate.catalogue import RULES, rule, rules

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ckpt_explorer"
CATALOGUE = PACKAGE / "validate" / "catalogue.py"
PREFIXES = sorted({r.id.split(".", 1)[0] for r in RULES.values()})
RULE_LIKE = re.compile(rf"^({'|'.join(PREFIXES)})\.[a-z][a-z0-9_]*$")
# strings of a rule's shape that are file names or key paths, never emitted as a rule
NOT_RULES = {
    *("config.json", "optimizer.bin", "optimizer.pt", "scheduler.bin", "scheduler.pt"),
    *("optimizer.param_groups", "scheduler.last_epoch"),
    *("tokenizer.json", "tokenizer.model", "tokenizer.chat_template"),
}


def _trees() -> dict[Path, ast.Module]:
    return {
        p: ast.parse(p.read_text(encoding="utf-8"))
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != CATALOGUE
    }


def _strings(node: ast.AST | None) -> list[str]:
    if node is None:
        return []
    return [
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def _severities(node: ast.AST | None) -> list[str]:
    """The literal severities ``node`` may take (both branches of a conditional)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _severities(node.body) + _severities(node.orelse)
    return []


def _findings() -> list[tuple[str, ast.Call]]:
    out = []
    for path, tree in _trees().items():
        for n in ast.walk(tree):
            if (
                isinstance(n, ast.Call)
                and getattr(n.func, "id", getattr(n.func, "attr", "")) == "Finding"
            ):
                out.append((f"{path.relative_to(ROOT)}:{n.lineno}", n))
    return out


def _written() -> dict[str, set[str]]:
    """Rule-shaped string constants of the package (the catalogue aside) -> where."""
    out: dict[str, set[str]] = defaultdict(set)
    for path, tree in _trees().items():
        for n in ast.walk(tree):
            if (
                isinstance(n, ast.Constant)
                and isinstance(n.value, str)
                and RULE_LIKE.match(n.value)
            ) and n.value not in NOT_RULES:
                out[n.value].add(f"{path.relative_to(ROOT)}:{n.lineno}")
    return out


def test_every_rule_id_written_in_the_package_is_catalogued() -> None:
    stray = {k: sorted(v) for k, v in _written().items() if k not in RULES}
    assert not stray, f"rule ids not in validate/catalogue.py: {stray}"


def test_every_literal_rule_of_a_finding_is_catalogued() -> None:
    """Also ids of a prefix no catalogued rule has (which the scan above cannot see)."""
    bad = []
    for where, call in _findings():
        first = (
            call.args[0]
            if call.args
            else next((k.value for k in call.keywords if k.arg == "rule"), None)
        )
        for s in _strings(first):
            if s not in RULES:
                bad.append(f"{where}: {s}")
    assert not bad, bad


def test_every_catalogued_rule_is_emitted_somewhere() -> None:
    written = _written()
    never = [r.id for r in RULES.values() if r.id not in written]
    assert not never, f"catalogued but written nowhere in the package: {never}"


def test_literal_severities_are_allowed_by_the_catalogue() -> None:
    bad = []
    for where, call in _findings():
        first = call.args[0] if call.args else None
        second = (
            call.args[1]
            if len(call.args) > 1
            else next((k.value for k in call.keywords if k.arg == "severity"), None)
        )
        if not isinstance(first, ast.Constant) or first.value not in RULES:
            continue
        allowed = RULES[first.value].severities
        for s in _severities(second):
            if s not in allowed:
                bad.append(f"{where}: {first.value} as {s}, catalogue says {allowed}")
    assert not bad, bad


def test_an_id_is_registered_once() -> None:
    try:
        rule("numeric.nonfinite", "error", "again")
    except ValueError as e:
        assert "twice" in str(e)
    else:
        raise AssertionError("a second registration of an id was accepted")
    assert [r.id for r in rules("config")][-3:] == [
        "tied.lm_head_missing",
        "tied.lm_head_differs",
        "tied.untied_but_equal",
    ]  # tied.* rules run with config


def test_readme_rule_table_is_the_generated_one() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "rules_table.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_validate_runs_the_catalogue_areas() -> None:
    from ckpt_explorer.validate.catalogue import AREAS
    from ckpt_explorer.validate.runner import AFTER_VIEW, BEFORE_VIEW

    stepped = {s.area for s in (*BEFORE_VIEW, *AFTER_VIEW)}
    assert stepped == set(AREAS)
    assert {r.area for r in RULES.values()} <= set(AREAS)


def test_a_new_rule_is_one_entry() -> None:
    """The path of a new rule: one ``rule(...)`` line gives its area (from its prefix), its
    place in ``rules(area)`` and its README row; the scans above then ask that some module
    emits it."""
    import importlib.util

    new = rule("integrity.example_only", "warning", "an example rule, registered by a test")
    try:
        assert new.area == "integrity" and rules("integrity")[-1] is new
        spec = importlib.util.spec_from_file_location(
            "rules_table", ROOT / "scripts/rules_table.py"
        )
        assert spec is not None and spec.loader is not None
        script = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(script)
        rows = script.table().splitlines()
        assert len(rows) == 2 + len(RULES) - 1  # the script reads the catalogue's file
        assert all(f"`{r.id}`" in script.table() for r in RULES.values() if r is not new)
    finally:
        del RULES[new.id]
