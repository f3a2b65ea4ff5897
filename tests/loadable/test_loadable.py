"""The loader table against the real loaders: each prediction (loads, or fails with the
loader's own message) is checked by running that loader on the same files."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from loadable_cases import agrees, run_all, run_oracle


@pytest.fixture(scope="module")
def state(real_checkpoints: Any) -> dict[str, Any]:
    return run_all(real_checkpoints)


def test_every_prediction_matches_the_real_loader(state: dict[str, Any]) -> None:
    wrong, n = [], 0
    for name, table in state["tables"].items():
        for v in table.verdicts:
            if name == "hf_noconfig" and v.loader == "colossalai.load_model":
                continue  # strict keys depend on a model that no config.json here describes
            real = state["results"][f"{name}|{v.loader}|{v.target}"]
            n += 1
            if why := agrees(v, real):
                wrong.append(f"{name} {v.loader} {v.target or '.'}: {why}")
    print(f"{n - len(wrong)}/{n} loader predictions right")
    assert not wrong, "\n".join(wrong)
    assert n >= 40


def _row(state: dict[str, Any], case: str, loader: str, target: str = "") -> Any:
    return next(
        v for v in state["tables"][case].verdicts if v.loader == loader and v.target == target
    )


def test_the_issue_cases_are_said(state: dict[str, Any]) -> None:
    two = state["tables"]["hf_two_index"]
    assert _row(state, "hf_two_index", "colossalai.load_model").error == "AssertionError"
    assert any("different weights" in c.message for c in two.conflicts)
    stale = state["tables"]["hf_stale_bin"]
    assert any("pytorch_model.bin is older" in c.message for c in stale.conflicts)
    v = _row(state, "cai_optim_noindex", "colossalai.load_optimizer")
    assert (v.error, v.meant) == ("ValueError", True) and "repair" in v.fix
    assert state["tables"]["cai_optim_noindex"].layouts[""].damaged
    assert _row(state, "ds_nolatest", "deepspeed.load_checkpoint").outcome == "silent"
    assert _row(state, "cai_state", "colossalai.load_optimizer", "optimizer").ok


def test_transformers_4_path_guess_is_cannot_tell(state: dict[str, Any]) -> None:
    """config.json without model_type: transformers 4 builds the architecture named in the
    path, or fails when none is (the real 4.x does both on the same files, in two folders), so
    its verdict is cannot_tell; 5.x fails on both, and validate reports only that."""
    from ckpt_explorer.validate import validate_checkpoint

    v4 = "transformers.from_pretrained@4"
    real = {c: state["results"][f"{c}|{v4}|"] for c in ("hf_bert-run", "hf_0412", "hf_noconfig")}
    assert real["hf_bert-run"]["ok"], real  # a BertLMHeadModel, GPT-2's weights left out
    assert not real["hf_0412"]["ok"] and "Unrecognized model" in real["hf_0412"]["message"]
    for case in real:
        four = _row(state, case, v4)
        assert (four.outcome, four.error) == ("cannot_tell", ""), four
        assert "path string" in four.message and "model_type" in four.fix
        five = _row(state, case, "transformers.from_pretrained@5")
        assert (five.outcome, five.error) == ("fails", "ValueError"), five
        report = validate_checkpoint(state["cases"][case], numeric=False)
        said = [f.message for f in report.findings if f.rule == "loadable.fails"]
        assert said and all("transformers 4" not in m for m in said), said
    lines = state["tables"]["hf_bert-run"].lines()
    assert any(x.strip().startswith("?") and "transformers 4.x" in x for x in lines), lines
    assert "? = cannot tell" in lines[-1]


def test_a_config_that_is_not_json(real_checkpoints: Any, tmp_path: Path) -> None:
    """Both majors raise transformers' own OSError before reading weights, as the real ones do
    (detection calls such a folder "other", so the loader table has no row: the prediction is
    asked for directly, as for a ColossalAI model folder whose config.json was cut off)."""
    from ckpt_explorer.loadable import transformers
    from ckpt_explorer.loadable.verdicts import Layout

    hf, _ = real_checkpoints("hf")
    folder = Path(shutil.copytree(hf / "gpt2_sharded", tmp_path / "cut"))
    (folder / "config.json").write_text('{"model_type": "gpt2",')
    rows = transformers.from_pretrained(folder, "", Layout("hf-model"))
    assert [v.loader for v in rows] == [f"transformers.from_pretrained@{m}" for m in (5, 4)]
    for v, family in zip(rows, ("hf", "hf4"), strict=True):
        assert (v.outcome, v.error, v.reads) == ("fails", "OSError", ("config.json",)), v
        job = {"id": v.loader, "loader": v.loader, "path": str(folder)}
        real = run_oracle(family, [job], tmp_path)[v.loader]
        assert not agrees(v, real), (v, real)


def test_validate_turns_them_into_findings(state: dict[str, Any]) -> None:
    from ckpt_explorer.validate import validate_checkpoint

    def rules(case: str) -> dict[str, str]:
        report = validate_checkpoint(state["cases"][case], numeric=False)
        return {f.rule: f.severity for f in report.findings if f.rule.startswith("loadable.")}

    assert rules("cai_optim_noindex") == {"loadable.damaged": "error", "loadable.fails": "error"}
    assert rules("hf_two_index")["loadable.conflict"] == "warning"
    assert rules("hf_stale_bin")["loadable.conflict"] == "warning"  # and ColossalAI's info
    assert rules("ds_nolatest")["loadable.fails"] == "error"
    assert rules("hf_ok") == {"loadable.fails": "info"}  # ColossalAI's strict load: tied lm_head
    assert rules("dcp_ok") == {}


def test_cli_inspect_shows_the_table_and_damage_is_named(state: dict[str, Any], capsys) -> None:
    import json

    from ckpt_explorer.cli import main

    assert main(["inspect", str(state["cases"]["hf_two_index"])]) == 0
    out = capsys.readouterr().out
    assert "who can load this" in out and "AssertionError" in out
    assert main(["inspect", str(state["cases"]["hf_ok"]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {v["loader"] for v in doc["loaders"]["verdicts"]} >= {"transformers.from_pretrained@5"}
    assert main(["inspect", str(state["cases"]["dcp_nometa"])]) == 2
    err = capsys.readouterr().err
    assert "DCP folder without .metadata" in err and "Traceback" not in err


def test_dashboard_card_rows(state: dict[str, Any]) -> None:
    from ckpt_explorer import open_checkpoint
    from ckpt_explorer.ui.components.loaders import loader_rows, loaders_block

    view = open_checkpoint(state["cases"]["hf_two_index"])
    rows = loader_rows(view)
    assert any(r["loader"] == "conflict" for r in rows)
    assert any(r["outcome"] == "fails" and "AssertionError" in r["says"] for r in rows)
    assert len(loaders_block(view)) == 1
