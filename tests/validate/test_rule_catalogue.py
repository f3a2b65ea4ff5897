"""The rule catalogue (validate/catalogue.py) is the one list of rule ids: every id written in
the package is catalogued, every catalogued id is written somewhere (a declaration aside), a
literal severity is one the catalogue allows, README's rule table is the generated one, and an
area declared in a module of its own is one registration."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt_explorer.validate import catalogue
from ckpt_explorer.validate.area import Area, Step, declare
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


def _declared(tree: ast.Module) -> set[int]:
    """ids of the string nodes that declare a rule (``declare("x.y", ...)``): no emission."""
    return {
        id(n.args[0])
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "declare" and n.args
    }


def _written() -> dict[str, set[str]]:
    """Rule-shaped string constants of the package (the catalogue and declarations aside) ->
    where."""
    out: dict[str, set[str]] = defaultdict(set)
    for path, tree in _trees().items():
        declared = _declared(tree)
        for n in ast.walk(tree):
            if (
                id(n) not in declared
                and isinstance(n, ast.Constant)
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
        assert len(rows) == 2 + len(RULES)  # the script reads the catalogue, areas and all
        assert all(f"`{r.id}`" in script.table() for r in RULES.values())
    finally:
        del RULES[new.id]


def test_an_area_module_is_registered_by_one_line() -> None:
    """The tokenizer area is declared in validate/tokenizer.py and registered by its entry in
    AREA_MODULES: its rules sit after config's, its name after config in AREAS, its step after
    config's in the runner."""
    from ckpt_explorer.validate import tokenizer
    from ckpt_explorer.validate.runner import AFTER_VIEW

    assert "tokenizer" in catalogue.AREA_MODULES and catalogue.REGISTERED["tokenizer"] is (
        tokenizer.AREA
    )
    ids = list(RULES)
    assert ids[ids.index("tied.untied_but_equal") + 1] == "tokenizer.ids_past_embedding"
    areas = list(catalogue.AREAS)
    assert areas[areas.index("config") + 1] == "tokenizer"
    steps = [s.area for s in AFTER_VIEW]
    assert steps[steps.index("config") + 1] == "tokenizer"
    assert [s for s in AFTER_VIEW if s.area == "tokenizer"] == list(tokenizer.AREA.steps)


@pytest.fixture
def restored_catalogue() -> Iterator[None]:
    rules, areas, registered = dict(RULES), catalogue.AREAS, dict(catalogue.REGISTERED)
    yield
    RULES.clear()
    RULES.update(rules)
    catalogue.AREAS = areas
    catalogue.REGISTERED.clear()
    catalogue.REGISTERED.update(registered)


def test_a_new_area_is_one_registration(restored_catalogue: None) -> None:
    """An area placed after ``scheduler`` (which has two steps after the view and none
    before): its rule, its name and its steps land right behind that area's, once each."""
    mine = declare("example.found", "warning", "an example area's rule, registered by a test")
    after_view = Step("example", lambda run: [])
    before_view = Step("example", lambda run: [], before_view=True)
    catalogue.register_area(Area("example", "scheduler", (mine,), (after_view, before_view)))
    ids = list(RULES)
    last_scheduler = max(i for i, r in enumerate(RULES.values()) if r.area == "scheduler")
    assert ids[last_scheduler + 1] == "example.found" and rules("example") == [mine]
    assert catalogue.AREAS[catalogue.AREAS.index("scheduler") + 1] == "example"
    steps = tuple(Step(a, print) for a in ("config", "scheduler", "bundle"))
    after = catalogue.with_steps(steps, before_view=False)
    assert [s.area for s in after] == [
        "config",
        "tokenizer",
        "scheduler",
        "example",
        "bundle",
        "hf_load",
    ]
    assert after[3] is after_view
    before = catalogue.with_steps((Step("security", print),), before_view=True)
    assert [s.area for s in before] == ["security", "example"] and before[1] is before_view
    with pytest.raises(ValueError, match="twice"):
        catalogue.register_area(Area("example", "config", (), ()))
    with pytest.raises(ValueError, match="no area"):
        catalogue.register_area(Area("other", "nowhere", (), ()))
    with pytest.raises(ValueError, match="another area"):
        catalogue.register_area(Area("other", "config", (), (Step("example", print),)))
