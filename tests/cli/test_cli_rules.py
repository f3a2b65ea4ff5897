"""``ckpt-explorer rules``: the rule catalogue as the command line prints it."""

from __future__ import annotations

import json

import pytest

from ckpt_explorer.cli import main
from ckpt_explorer.validate.catalogue import AREAS, RULES


def test_json_is_the_whole_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in doc] == list(RULES)
    for r in doc:
        rule = RULES[r["id"]]
        assert (r["area"], tuple(r["severities"]), r["doc"]) == (
            rule.area,
            rule.severities,
            rule.doc,
        )
    assert {r["area"] for r in doc} <= set(AREAS)


def test_text_lists_every_rule_once_under_its_area(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules"]) == 0
    lines = capsys.readouterr().out.splitlines()
    area = None
    seen = []
    for line in lines:
        if not line.startswith(" "):
            area = line.rstrip(":")
            continue
        rule_id, severities, doc = line.split(maxsplit=2)
        rule = RULES[rule_id]
        assert (area, severities, doc) == (rule.area, "/".join(rule.severities), rule.doc)
        seen.append(rule_id)
    assert sorted(seen) == sorted(RULES)


def test_one_area(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "--area", "loadable", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in doc] == [i for i, r in RULES.items() if r.area == "loadable"]
    assert doc and all(r["area"] == "loadable" for r in doc)
    with pytest.raises(SystemExit) as e:
        main(["rules", "--area", "no_such_area"])
    assert e.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
