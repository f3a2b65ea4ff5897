"""The rule catalogue (validate/catalogue.py, from the areas' declarations in validate/areas/)
is the one list of rule ids: every id written in the package is catalogued, every catalogued id
is written somewhere (a declaration aside), a literal severity is one the catalogue allows,
README's rule table is the generated one, and an area is one module + one line of AREAS."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest

from ckpt_explorer.validate import catalogue
from ckpt_explorer.validate.area import Area, Step, declare
from ckpt_explorer.validate.catalogue import RULES, arrange, rules

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ckpt_explorer"
PREFIXES = sorted({r.id.split(".", 1)[0] for r in RULES.values()})
RULE_LIKE = re.compile(rf"^({'|'.join(PREFIXES)})\.[a-z][a-z0-9_]*$")
# strings of a rule's shape that are file names or key paths, never emitted as a rule
NOT_RULES = {
    *("config.json", "optimizer.bin", "optimizer.pt", "scheduler.bin", "scheduler.pt"),
    *("optimizer.param_groups", "scheduler.last_epoch"),
    *("tokenizer.json", "tokenizer.model", "tokenizer.chat_template"),
    "config.worktree",  # git's per-worktree config file (security/git_dir.py)
}


def _trees() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))}


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
    """Rule-shaped string constants of the package (declarations aside) -> where."""
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
    assert not stray, f"rule ids declared in no area of validate/areas/: {stray}"


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


def _areas() -> list[Area]:
    return list(catalogue.REGISTERED.values())


def test_an_id_or_an_area_is_registered_once() -> None:
    *head, last = _areas()
    again = declare(last.rules[0].id, "error", "again")
    with pytest.raises(ValueError, match=rf"twice: \['{last.rules[0].id}'\]"):
        arrange([*head, replace(last, rules=(*last.rules, again))])
    with pytest.raises(ValueError, match="twice"):
        arrange([*head, last, head[0]])
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


def test_a_new_rule_is_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The path of a new rule: one ``declare(...)`` in its area's ``AREA`` gives its area (from
    its prefix), its place in ``rules(area)`` and its README row; the scans above then ask that
    some module emits it."""
    import importlib.util

    new = declare("integrity.example_only", "warning", "an example rule, declared by a test")
    areas = [replace(a, rules=(*a.rules, new)) if a.name == "integrity" else a for a in _areas()]
    arranged = arrange(areas).rules
    assert (
        new.area == "integrity"
        and [r for r in arranged.values() if r.area == "integrity"][-1] is new
    )
    monkeypatch.setattr(catalogue, "RULES", arranged)
    spec = importlib.util.spec_from_file_location("rules_table", ROOT / "scripts/rules_table.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    rows = script.table().splitlines()
    assert len(rows) == 2 + len(arranged) == 3 + len(RULES)  # the script reads the catalogue
    assert all(f"`{r.id}`" in script.table() for r in arranged.values())


def test_an_area_module_is_registered_by_one_line() -> None:
    """The tokenizer area is declared in validate/areas/tokenizer.py and registered by its line
    in AREAS, below config's: its rules sit after config's, its step after config's."""
    from ckpt_explorer.validate.areas import tokenizer
    from ckpt_explorer.validate.runner import AFTER_VIEW

    assert catalogue.REGISTERED["tokenizer"] is tokenizer.AREA
    areas = list(catalogue.AREAS)
    assert areas[areas.index("config") + 1] == "tokenizer"
    ids = list(RULES)
    assert ids[ids.index("tied.untied_but_equal") + 1] == "tokenizer.ids_past_embedding"
    steps = [s.area for s in AFTER_VIEW]
    assert steps[steps.index("config") + 1] == "tokenizer"
    assert [s for s in AFTER_VIEW if s.area == "tokenizer"] == list(tokenizer.AREA.steps)


def _in_order(areas: list[str]) -> list[str]:
    return list(dict.fromkeys(areas))


def test_the_orders_that_differ_from_the_table() -> None:
    """Rules, report names and steps follow AREAS but where an area anchors them ahead of
    another's: quantized's rules before loadable's, numeric's step before optimizer's (whose
    rules read its figures). What validate --json, `rules` and README's table show."""
    from ckpt_explorer.validate.runner import AFTER_VIEW, BEFORE_VIEW

    table = list(catalogue.AREAS)
    assert catalogue.REGISTERED["quantized"].rules_before == "loadable"
    assert _in_order([r.area for r in RULES.values()]) == [
        *("security", "integrity", "quantized", "loadable", "config", "tokenizer"),
        *table[table.index("optimizer") :],
    ]
    assert _in_order([s.area for s in AFTER_VIEW]) == [
        *("security", "integrity", "quantized", "config", "tokenizer", "numeric", "optimizer"),
        *("scheduler", "bundle", "hf_load"),
    ]
    assert [s.area for s in BEFORE_VIEW] == ["security", "integrity", "loadable"]


def test_a_new_area_is_one_registration() -> None:
    """An area listed after ``scheduler`` (which has two steps after the view and none before):
    its rule, its name and its steps land right behind that area's, once each; one anchored
    ``before`` another area lands right ahead of that area's rules and steps."""
    mine = declare("example.found", "warning", "an example area's rule, declared by a test")
    after_view = Step("example", lambda run: [])
    before_view = Step("example", lambda run: [], before_view=True)
    example = Area("example", (mine,), (after_view, before_view))
    areas = _areas()
    at = catalogue.AREAS.index("scheduler") + 1
    arranged = arrange([*areas[:at], example, *areas[at:]])
    ids = list(arranged.rules)
    last_scheduler = max(i for i, r in enumerate(arranged.rules.values()) if r.area == "scheduler")
    assert ids[last_scheduler + 1] == "example.found"
    after = [s.area for s in arranged.after_view]
    assert after[after.index("bundle") - 1] == "example" and after.count("example") == 1
    assert after[after.index("example") - 1] == "scheduler"
    assert arranged.after_view[after.index("example")] is after_view
    assert [s.area for s in arranged.before_view] == [
        *("security", "integrity", "loadable", "example")
    ]
    assert arranged.before_view[-1] is before_view

    early_rule = declare("early.found", "info", "an example anchored ahead of other areas")
    early_step = Step("early", lambda run: [], before="optimizer")
    early = Area("early", (early_rule,), (early_step,), rules_before="loadable")
    arranged = arrange([*areas, early])  # listed last, anchored ahead
    ids = list(arranged.rules)
    first_loadable = min(i for i, r in enumerate(arranged.rules.values()) if r.area == "loadable")
    assert ids[first_loadable - 1] == "early.found"
    after = [s.area for s in arranged.after_view]
    assert after[after.index("optimizer") - 1] == "early"
    assert after[after.index("early") - 1] == "numeric"  # anchored there too, listed earlier

    with pytest.raises(ValueError, match="no area"):
        arrange([*areas, replace(early, rules_before="nowhere")])
    with pytest.raises(ValueError, match="no area"):
        arrange([*areas, Area("other", (), (Step("other", print, before="nowhere"),))])
    with pytest.raises(ValueError, match="another area"):
        arrange([*areas, Area("other", (), (Step("example", print),))])
    with pytest.raises(ValueError, match="another area"):
        arrange([*areas, Area("other", (mine,), ())])
