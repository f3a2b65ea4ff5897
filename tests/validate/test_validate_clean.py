"""False alarms are bugs: clean outputs of every real tool produce no error-level finding.
Also the CLI contract of ``validate`` and ``doctor`` (exit codes, --json)."""

from __future__ import annotations

import json

import pytest
from validate_util import copy_case

from ckpt_explorer.cli import main
from ckpt_explorer.validate import validate_checkpoint

TOOLS = ("torch", "hf", "dcp", "deepspeed", "colossalai")


@pytest.mark.parametrize("tool", TOOLS)
def test_clean_outputs_have_no_errors(real_checkpoints, tool):
    root, manifest = real_checkpoints(tool)
    assert manifest["cases"]
    for case_id, case in manifest["cases"].items():
        report = validate_checkpoint(root / case["path"])
        errors = report.by_severity("error")
        if "interrupted" in case_id:  # an interrupted pipeline save is a fault by design
            assert {f.rule for f in errors} == {"integrity.interrupted_save"}, case_id
            continue
        assert not errors, (case_id, errors)
        frame = report.to_frame()
        assert list(frame.columns)[:3] == ["rule", "severity", "message"]


def test_cli_validate_exit_codes_and_json(real_checkpoints, tmp_path, capsys):
    folder = copy_case(real_checkpoints, "hf", "gpt2_sharded", tmp_path)
    assert main(["validate", str(folder), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["summary"]) == {"error", "warning", "info"}
    assert doc["summary"]["error"] == 0
    assert all(
        {"rule", "severity", "message", "tensor", "file", "param_id"} <= set(f)
        for f in doc["findings"]
    )
    (folder / "model-00001-of-00004.safetensors").unlink()
    assert main(["validate", str(folder), "--no-numeric"]) == 1
    out = capsys.readouterr().out
    assert "ERROR" in out and "integrity.missing_file" in out
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a checkpoint at all")
    assert main(["validate", str(junk)]) == 2
    assert "error" in capsys.readouterr().err


def test_cli_doctor_json(tmp_path, capsys):
    from ckpt_explorer.demo import make_demo

    root = make_demo(tmp_path / "demo")
    assert main(["doctor", str(root / "resumed_from"), str(root / "after_resume"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["causes"][0]["cause"] == "scheduler_not_restored"
    assert doc["causes"][0]["evidence"]
    assert main(["doctor", str(root / "resumed_from"), str(tmp_path / "nothing")]) == 2


def test_validate_accepts_a_view_and_reports_progress(real_checkpoints):
    from ckpt_explorer import open_checkpoint

    root, manifest = real_checkpoints("hf")
    view = open_checkpoint(root / manifest["cases"]["gpt2_sharded"]["path"])
    seen = []
    report = validate_checkpoint(view, progress=lambda e: seen.append((e.done, e.total)))
    assert report.ok and seen and seen[-1][0] == seen[-1][1]
