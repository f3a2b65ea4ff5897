"""Verdicts on real PyTorch Lightning checkpoints (``.ckpt`` of ``ModelCheckpoint``).

The states come from tests/fixture_makers/realworld_lightning_maker.py (a real
``lightning.Trainer`` fit, a resume and a weights-only restart); tests/realworld_check.py
scores ckpt_explorer against their truth.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from realworld_check import check_resume, check_state, resume_problems, state_problems

from ckpt_explorer import open_checkpoint, validate_checkpoint
from ckpt_explorer.timeline import build_timeline

MAKER = "realworld_lightning"
STATES = [
    "lightning_step4",
    "lightning_step8",
    "lightning_resume_clean",
    "lightning_restart_weights_only",
    "lightning_hydra_cfg_step4",
]
RESUMES = ["lightning_resume_clean", "lightning_restart_weights_only"]


@pytest.fixture(scope="module")
def corpus(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints(MAKER)
    return Path(root), manifest


def test_corpus_cases(corpus: tuple[Path, dict[str, Any]]) -> None:
    _, manifest = corpus
    assert sorted(manifest["cases"]) == sorted(STATES)
    # the callbacks really hold +Inf sentinels: the case for not calling them diverged
    step4 = manifest["cases"]["lightning_step4"]
    assert any(v == "inf" for v in step4["callback_tensors"].values()), step4


@pytest.mark.parametrize("case_id", STATES)
def test_state_verdicts(corpus: tuple[Path, dict[str, Any]], case_id: str) -> None:
    """Clean: no error or warning (the callbacks' +Inf is run state, not a weight); every
    optimizer id named right."""
    root, manifest = corpus
    case = manifest["cases"][case_id]
    view = open_checkpoint(root / case["path"])
    assert (view.family, view.kind) == (case["family"], case["kind"])
    result = check_state(root, case_id, case)
    problems = state_problems(result)
    assert not problems, "\n".join([result.describe(), *problems])
    assert result.verdict_counts()["right"] == len(result.names) == 6, result.describe()


@pytest.mark.parametrize("case_id", RESUMES)
def test_resume_verdicts(corpus: tuple[Path, dict[str, Any]], case_id: str) -> None:
    """A resume through ``ckpt_path``: no cause scores >= 0.5 (OneCycleLR's cycled betas are
    not a config change); a weights-only restart: the optimizer reset ranks first."""
    root, manifest = corpus
    result = check_resume(root, manifest, case_id)
    problems = resume_problems(result)
    assert not problems, "\n".join([result.describe(), *problems])


def test_callback_state_is_run_state_not_weights(corpus: tuple[Path, dict[str, Any]]) -> None:
    """``callbacks`` is not a model part; its +Inf values are reported as run state (info),
    and the model part holds exactly the module's weights."""
    root, manifest = corpus
    case = manifest["cases"]["lightning_step4"]
    view = open_checkpoint(root / case["path"])
    assert view.parts["state_dict"].kind == "model"
    assert "callbacks" not in view.parts
    assert sorted(r.name for r in view.parts["state_dict"].tensors) == case["model_keys"]
    report = validate_checkpoint(view)
    run_state = [f for f in report.findings if f.rule == "numeric.nonfinite_run_state"]
    assert run_state and all(f.severity == "info" for f in run_state)
    assert {f.tensor for f in run_state} == {
        f"callbacks.{k}" for k, v in case["callback_tensors"].items() if v == "inf"
    }


def test_timeline_clean_run(corpus: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """A fit resumed from last.ckpt: steps from the files, names parsed (``epoch=E-step=S``),
    no error or warning; last.ckpt is a copy of the last step, named as such."""
    root, manifest = corpus
    run = root / manifest["cases"]["lightning_step4"]["run_folders"]["clean"]
    t = build_timeline(run, cache_dir=tmp_path / "cache")
    assert [c.step for c in t.checkpoints] == [4, 8, 12, 16, 16]
    loud = [a for a in t.anomalies if a.severity in ("error", "warning")]
    assert not loud, [(a.kind, a.message) for a in loud]
    copy = [a for a in t.anomalies if a.kind == "duplicate_step"]
    assert len(copy) == 1 and "(last.ckpt)" in copy[0].message


def test_timeline_restart_folder(corpus: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """A restart written into the fit's folder (``-v1`` names): the duplicated steps and the
    mixed runs are warned about, and ``-v1`` is not read as step 1."""
    root, manifest = corpus
    run = root / manifest["cases"]["lightning_step4"]["run_folders"]["restart"]
    t = build_timeline(run, cache_dir=tmp_path / "cache")
    kinds = {(a.kind, a.step) for a in t.anomalies if a.severity == "warning"}
    assert {("duplicate_step", 4), ("duplicate_step", 8)} <= kinds
    assert any(k == "mixed_runs" for k, _ in kinds), kinds
    assert not any(a.kind == "step_name_mismatch" for a in t.anomalies)
    assert not any(a.severity == "error" for a in t.anomalies)


def test_model_only_conversion_loads_into_the_module(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """``convert --to safetensors --model-only`` of a .ckpt writes the module's own keys:
    the LightningModule loads them strictly (a real client check)."""
    root, manifest = corpus
    case = manifest["cases"]["lightning_step8"]
    out = tmp_path / "model.safetensors"
    cli = [sys.executable, "-m", "ckpt_explorer", "convert"]
    proc = subprocess.run(
        [*cli, str(root / case["path"]), str(out), "--to", "safetensors", "--model-only", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["result"]["verified"] is True
    script = (
        "import sys, torch; sys.path.insert(0, sys.argv[3]);"
        "from safetensors.torch import load_file;"
        "from realworld_lightning_maker import _module_class;"
        "m = _module_class().load_from_checkpoint(sys.argv[1]);"
        "sd = load_file(sys.argv[2]);"
        "m.load_state_dict(sd, strict=True);"
        "ref = torch.load(sys.argv[1], map_location='cpu', weights_only=False)['state_dict'];"
        "assert all(torch.equal(sd[k], ref[k]) for k in ref), 'values differ';"
        "print('ok')"
    )
    makers = Path(__file__).parent.parent / "fixture_makers"
    check = subprocess.run(
        [sys.executable, "-c", script, str(root / case["path"]), str(out), str(makers)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0 and check.stdout.strip() == "ok", check.stderr[-3000:]


def test_hydra_config_checkpoint_opens_and_is_not_unsafe(
    corpus: tuple[Path, dict[str, Any]],
) -> None:
    """An OmegaConf config in the hyperparameters (its nodes point back at their parents):
    the file opens (the back references are cut), the config's classes are known inert (scan: not unsafe) and plain torch.load's refusal is info."""
    from ckpt_explorer.security.scan import scan_paths

    root, manifest = corpus
    path = root / manifest["cases"]["lightning_hydra_cfg_step4"]["path"]
    view = open_checkpoint(path)
    assert view.kind == "training_state"
    assert "hyper_parameters" in view.values
    result = scan_paths([path])
    assert result.exit_code == 0, [f.message for v in result.verdicts for f in v.findings]
    report = validate_checkpoint(view)
    assert [f.severity for f in report.findings if f.rule == "security.weights_only_refused"] == [
        "info"
    ]
    assert not [f for f in report.findings if f.rule == "security.code_execution"]
