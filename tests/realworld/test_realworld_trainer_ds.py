"""Verdicts on real transformers Trainer + DeepSpeed runs (ZeRO-2 and ZeRO-3 on CPU).

The runs come from tests/fixture_makers/realworld_trainer_ds_maker.py: ``checkpoint-N`` folders
(HF weights, scheduler.pt, rng_state.pth, trainer_state.json, training_args.bin beside
DeepSpeed's ``latest`` + ``global_stepN/``), a clean resume and the ``save_model`` folder.
tests/realworld_check.py scores ckpt_explorer against the maker's truth.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from realworld_check import (
    assert_state_holds,
    check_resume,
    resume_problems,
)

from ckpt_explorer import open_checkpoint, resume_doctor, validate_checkpoint
from ckpt_explorer.security import judge as security_judge
from ckpt_explorer.security.scan import scan_paths
from ckpt_explorer.timeline.build import build_timeline

MAKER = "realworld_trainer_ds"
STAGES = (2, 3)
STATES = [f"ds_zero{s}_{n}" for s in STAGES for n in ("step2", "step4", "resume_clean")]
RESUMES = [f"ds_zero{s}_resume_clean" for s in STAGES]
FINALS = [f"ds_zero{s}_final_model" for s in STAGES]


@pytest.fixture(scope="module")
def corpus_ds(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints(MAKER)
    return Path(root), manifest


def test_corpus_cases(corpus_ds: tuple[Path, dict[str, Any]]) -> None:
    """Every case listed here is made (and nothing else), with the contract's keys."""
    _, manifest = corpus_ds
    cases = manifest["cases"]
    assert sorted(cases) == sorted(STATES + FINALS)
    assert sorted(c for c in cases if cases[c].get("resume_of")) == sorted(RESUMES)
    for cid in STATES:
        assert cases[cid]["setup"] and cases[cid]["id_names"], cid
        assert cases[cid]["expect"] == "clean", cid


@pytest.mark.parametrize("case_id", STATES)
def test_checkpoint_is_read_whole(corpus_ds: tuple[Path, dict[str, Any]], case_id: str) -> None:
    """A Trainer+DeepSpeed checkpoint-N is the HF training state it is: its weights, scheduler,
    RNG, trainer state and args are parts beside the DeepSpeed tag folder, which keeps its
    optimizer view (names recorded by param_shapes), ZeRO stage and step."""
    root, manifest = corpus_ds
    case = manifest["cases"][case_id]
    view = open_checkpoint(root / case["path"])
    assert (view.family, view.kind) == (case["family"], case["kind"])
    assert {n: p.family for n, p in view.parts.items()} == case["state_parts"]
    kinds = {n: p.kind for n, p in view.parts.items()}
    assert kinds["scheduler.pt"] == "scheduler" and kinds["rng_state.pth"] == "rng"
    assert kinds["training_args.bin"] == "args" and kinds["model"] == "model"
    tag = f"global_step{case['global_step']}"
    ds = view.parts[tag]
    assert ds.values["zero_stage"] == case["zero_stage"]
    assert ds.values["global_steps"] == case["global_step"]
    assert view.values["trainer_state.json/global_step"] == case["global_step"]
    ((loc, truth),) = case["id_names"].items()
    optim = ds.parts[loc.removeprefix(f"{tag}/")].optimizer
    assert optim is not None
    assert {str(i): n.name for i, n in optim.names.items()} == truth
    assert {n.how for n in optim.names.values()} == {"recorded"}
    evidence = view.detection.evidence
    assert not [e for e in evidence if e.endswith("→ other")], evidence
    assert any(e.startswith("latest, zero_to_fp32.py, zero_to_torch.py → ") for e in evidence)


@pytest.mark.parametrize("case_id", STATES)
def test_state_verdicts(corpus_ds: tuple[Path, dict[str, Any]], case_id: str) -> None:
    """Clean states: no error/warning finding; every optimizer id named right."""
    result = assert_state_holds(*corpus_ds, case_id)
    assert result.verdict_counts()["right"] == len(result.names) == 21, result.describe()
    infos = {f.file for f in result.findings if f.rule == security_judge.REFUSED}
    assert {"rng_state.pth", "training_args.bin"} <= infos  # truly refused by torch, as info


@pytest.mark.parametrize("case_id", RESUMES)
def test_resume_verdicts(corpus_ds: tuple[Path, dict[str, Any]], case_id: str) -> None:
    """The clean resume: no cause scores >= 0.5, and RNG is seen saved on both sides."""
    root, manifest = corpus_ds
    result = check_resume(root, manifest, case_id)
    problems = resume_problems(result)
    assert not problems, "\n".join([result.describe(), *problems])
    cases = manifest["cases"]
    a, b = cases[cases[case_id]["resume_of"]], cases[case_id]
    report = resume_doctor(root / a["path"], root / b["path"])
    assert report.facts["RNG state saved"] == (True, True)
    assert report.facts["optimizer step"] == (4, 6)
    assert report.facts["scheduler steps"] == (4, 6)


@pytest.mark.parametrize("stage", STAGES)
def test_scan_refuses_only_what_torch_refuses(
    corpus_ds: tuple[Path, dict[str, Any]], stage: int
) -> None:
    """Every file is safe or data (the DeepSpeed config classes in training_args.bin are inert
    records); torch's refusal is reported exactly when torch's own weights_only check names a
    global it does not allow."""
    root, _ = corpus_ds
    report = scan_paths([root / f"zero{stage}"])
    assert report.verdicts and report.exit_code == 0
    refused = set()
    for v in report.verdicts:
        assert v.verdict in ("safe", "data"), (v.path, v.reasons)
        if v.format != "torch.save zip":  # safetensors, JSON, text: no pickle
            assert v.verdict == "data", (v.path, v.format)
            continue
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(v.path)
        flagged = any(f.rule == security_judge.REFUSED for f in v.findings)
        assert flagged == bool(unsafe), (v.path, v.findings, unsafe)
        if flagged:
            refused.add(v.path.name)
    assert refused == {
        "rng_state.pth",
        "training_args.bin",
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
    }


@pytest.mark.parametrize("case_id", FINALS)
def test_save_model_folder(corpus_ds: tuple[Path, dict[str, Any]], case_id: str) -> None:
    """Trainer.save_model's folder (weights, config, training_args.bin) validates without
    error or warning (the args file's refusal is info), and transformers loads it."""
    from transformers import AutoModelForCausalLM

    root, manifest = corpus_ds
    case = manifest["cases"][case_id]
    path = root / case["path"]
    view = open_checkpoint(path)
    assert (view.family, view.kind) == (case["family"], case["kind"])
    report = validate_checkpoint(path)
    bad = [f for f in report.findings if f.severity in ("error", "warning")]
    assert not bad, [(f.rule, f.file, f.message) for f in bad]
    args = [f for f in report.findings if f.file == "training_args.bin"]
    assert [(f.rule, f.severity) for f in args] == [(security_judge.REFUSED, "info")]
    model = AutoModelForCausalLM.from_pretrained(path)
    names = {r.name for r in view.tensors}
    assert names == set(model.state_dict())
    ckpt = path.parent / "checkpoint-6"
    assert (ckpt / "model.safetensors").is_file()
    AutoModelForCausalLM.from_pretrained(ckpt)  # checkpoint-N holds gathered weights too


@pytest.mark.parametrize("stage", STAGES)
def test_timeline_of_run(corpus_ds: tuple[Path, dict[str, Any]], stage: int) -> None:
    """The run folder (two saves, a resume, the save_model folder beside them): every
    checkpoint has model, optimizer, scheduler and RNG, and nothing is flagged."""
    root, _ = corpus_ds
    timeline = build_timeline(root / f"zero{stage}")
    assert [c.step for c in timeline.checkpoints] == [2, 4, 6]
    for c in timeline.checkpoints:
        assert c.error is None and c.has_rng, (c.path, c.error)
        assert {"model", "optimizer", "scheduler", "rng"} <= set(c.parts), (c.path, c.parts)
        assert c.opt_step == c.sched_step == c.step, (c.path, c.opt_step, c.sched_step)
    flagged = [a for a in timeline.anomalies if a.severity in ("error", "warning")]
    assert not flagged, [(a.kind, a.message) for a in flagged]


def test_tags_and_bare_save_folder(corpus_ds: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """Only the tag ``latest`` names is the DeepSpeed part (an older tag left beside it is
    "other", its optimizer file's refusal info, never an error); the same folder without the
    Trainer's files is the bare DeepSpeed save folder it then is."""
    root, _ = corpus_ds
    ckpt = tmp_path / "checkpoint-4"
    shutil.copytree(root / "zero2" / "checkpoint-4", ckpt)
    shutil.copytree(ckpt / "global_step4", ckpt / "global_step2")
    view = open_checkpoint(ckpt)
    assert view.family == "training-state" and "global_step2" not in view.parts
    assert "global_step2 → other" in view.detection.evidence
    report = validate_checkpoint(ckpt, numeric=False)
    assert not [f for f in report.findings if f.severity in ("error", "warning")], report.findings
    stale = [f for f in report.findings if f.file and f.file.startswith("global_step2/")]
    assert stale and {f.severity for f in stale} == {"info"}
    shutil.rmtree(ckpt / "global_step2")
    for f in ckpt.iterdir():
        if f.is_file() and f.name not in ("latest", "zero_to_fp32.py", "zero_to_torch.py"):
            f.unlink()
    bare = open_checkpoint(ckpt)
    assert (bare.family, bare.detection.detail) == ("deepspeed", "tag global_step4")


def test_zero3_checkpoint_without_gathered_weights_converts(
    corpus_ds: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """A ZeRO-3 ``checkpoint-N`` saved without gathered weights (the layout of
    ``stage3_gather_16bit_weights_on_model_save: false``: no model.safetensors) converts to an
    HF folder from the ZeRO partitions, with the folder's config: transformers loads it and
    its weights equal the ones the Trainer gathered."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from ckpt_explorer import plan_conversion, run_conversion

    root, _ = corpus_ds
    ckpt = shutil.copytree(root / "zero3" / "checkpoint-4", tmp_path / "checkpoint-4")
    gathered = load_file(ckpt / "model.safetensors")
    (ckpt / "model.safetensors").unlink()
    out = tmp_path / "hf"
    result = run_conversion(plan_conversion(ckpt, out, to="hf"))
    assert result.verified and (out / "config.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(out)
    got = model.state_dict()
    for name, ref in gathered.items():
        assert torch.equal(got[name].to(ref.dtype), ref), name
