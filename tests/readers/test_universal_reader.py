"""DeepSpeed universal checkpoints (readers/deepspeed/universal*.py, convert/universal.py) on
real ``ds_to_universal`` output.

Two sources: the realworld_dsuniversal corpus (a tiny LM trained by DeepSpeed ZeRO-1/2 in bf16
and fp32, converted by DeepSpeed's own ``ds_to_universal``; its manifest records every file's
tensors and DeepSpeed's ``zero_to_fp32`` output), and, made here by the same tools in a child
process (deepspeed is imported there only), universal folders of the HF Trainer ZeRO-2 / ZeRO-3
``checkpoint-4`` of realworld_trainer_ds: a Llama with ``config.json`` beside it, so the
conversion is loaded by ``from_pretrained``.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from realworld_check import check_names
from safetensors.torch import load_file

from ckpt_explorer import detect_format, open_checkpoint, plan_conversion, run_conversion
from ckpt_explorer.formats import specs
from ckpt_explorer.inspect_report import inspect_report
from ckpt_explorer.view import CheckpointView

sys.path.insert(0, str(Path(__file__).parent.parent / "fixture_makers"))
from realworld_dsuniversal_maker import BASE_STEPS, planned_cases

UNIVERSAL = sorted(cid for cid in planned_cases() if cid.endswith("_universal"))
MODEL = "mp_rank_00_model_states.pt"
MASTERS = "zero/*/fp32.pt"
OPTIM = "zero/optimizer_state.pt"

# DeepSpeed's own tools on copies of HF Trainer checkpoint-N folders (one deepspeed import)
DS_CHILD = r"""
import sys, warnings
warnings.simplefilter("ignore")
from deepspeed.checkpoint import ds_to_universal
from deepspeed.utils.zero_to_fp32 import convert_zero_checkpoint_to_fp32_state_dict
for folder in sys.argv[1:]:
    sys.argv = ["ds_to_universal.py", "--input_folder", f"{folder}/global_step4",
                "--output_folder", f"{folder}/global_step4_universal", "--num_extract_workers",
                "1", "--num_merge_workers", "1", "--inject_missing_state"]
    ds_to_universal.main(ds_to_universal.parse_arguments())
    convert_zero_checkpoint_to_fp32_state_dict(folder, f"{folder}.fp32", safe_serialization=True)
"""


@pytest.fixture(scope="module")
def corpus(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints("realworld_dsuniversal")
    return Path(root), manifest


def _case(corpus: tuple[Path, dict[str, Any]], cid: str) -> tuple[Path, dict[str, Any]]:
    root, manifest = corpus
    case = manifest["cases"][cid]
    return root / case["path"], case


def _truth(corpus: tuple[Path, dict[str, Any]], cid: str) -> dict[str, str]:
    """The ids of the ZeRO checkpoint the universal folder was converted from."""
    base = corpus[1]["cases"][corpus[1]["cases"][cid]["converted_from"]]
    return next(iter(base["id_names"].values()))


@pytest.mark.parametrize("cid", UNIVERSAL)
def test_detected_ahead_of_the_deepspeed_folder(
    corpus: tuple[Path, dict[str, Any]], cid: str
) -> None:
    path, case = _case(corpus, cid)
    detection = detect_format(path)
    assert (detection.family, detection.kind) == ("deepspeed-universal", "training_state")
    assert any("zero/optimizer_state.pt with zero_stage" in e for e in detection.evidence)
    assert "'latest_universal' in the save folder names this folder" in detection.evidence
    assert detection.detail == f"ZeRO-{case['zero_stage']} universal checkpoint"
    order = [s.name for s in specs("dir")]
    assert order.index("deepspeed-universal") < order.index("deepspeed")
    # the save folder: 'latest' names the ZeRO tag, which is what DeepSpeed loads by default
    assert detect_format(path.parent).family == "deepspeed"


@pytest.mark.parametrize("cid", UNIVERSAL)
def test_parts_roles_and_run_position(corpus: tuple[Path, dict[str, Any]], cid: str) -> None:
    path, case = _case(corpus, cid)
    view = open_checkpoint(path)
    assert {n: p.kind for n, p in view.parts.items()} == {
        MODEL: "model",
        f"{MODEL}:lr_scheduler": "scheduler",
        f"{MODEL}:run_state": "running_state",
        MASTERS: "model",
        OPTIM: "optimizer",
    }
    assert view.values["global_steps"] == case["global_steps"] == BASE_STEPS
    assert view.values["zero_stage"] == case["zero_stage"]
    assert view.parts[f"{MODEL}:run_state"].values["global_steps"] == BASE_STEPS
    sched = view.parts[f"{MODEL}:lr_scheduler"].values
    assert sched["last_epoch"] == BASE_STEPS and sched["_step_count"] == BASE_STEPS + 1
    module = {r.dtype for r in view.tensors}
    assert module == {"bfloat16" if case["bf16"] else "float32"}
    assert {r.dtype for r in view.parts[MASTERS].tensors} == {"float32"}
    optim = view.parts[OPTIM]
    assert optim.optimizer is not None
    steps = [r for r in optim.tensors if r.name.endswith(".step")]
    assert len(steps) == len(case["param_names"])
    assert {float(optim.load(r.name)) for r in steps} == {float(BASE_STEPS)}
    groups = optim.optimizer.param_groups
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert sorted(p for g in groups for p in g["params"]) == list(range(len(case["param_names"])))


@pytest.mark.parametrize("cid", UNIVERSAL)
def test_listing_equals_the_files(corpus: tuple[Path, dict[str, Any]], cid: str) -> None:
    path, case = _case(corpus, cid)
    view = open_checkpoint(path)
    on_disk = {p.relative_to(path).as_posix(): p.stat().st_size for p in path.rglob("*.pt")}
    assert {f.path: f.nbytes for f in view.files} == on_disk
    masters = {r.name: r for r in view.parts[MASTERS].tensors}
    assert set(masters) == set(case["param_names"])
    optim = view.parts[OPTIM]
    assert optim.optimizer is not None
    by_name = {n: pid for pid, n in optim.optimizer.param_names.items()}
    states = {r.name: r for r in optim.tensors}
    for name, files in case["universal_params"].items():
        for stem, truth in files.items():
            rec = masters[name] if stem == "fp32" else states[f"state.{by_name[name]}.{stem}"]
            want = truth["tensor"]
            assert (rec.dtype, list(rec.shape)) == (want["dtype"], want["shape"]), (name, stem)
            assert rec.file == f"{name}/{stem}.pt"
        got = float(view.parts[MASTERS].load(name).double().sum())
        assert math.isclose(got, files["fp32"]["tensor"]["sum"], rel_tol=1e-9, abs_tol=1e-12)
    # parameter_count counts the model once: the module copy, not masters or moments
    n = sum(math.prod(r.shape) for r in masters.values())
    assert inspect_report(view)["parameter_count"] == n == view.parts[MODEL].element_count


@pytest.mark.parametrize("cid", UNIVERSAL)
def test_optimizer_ids_are_named_as_torch_numbers_them(
    corpus: tuple[Path, dict[str, Any]], cid: str
) -> None:
    path, _ = _case(corpus, cid)
    view = open_checkpoint(path)
    checks, missing = check_names(path, view, {"zero": _truth(corpus, cid)})
    counts = Counter(c.verdict for c in checks)
    assert not missing and counts == {"right": 16}, counts
    optim = view.parts[OPTIM].optimizer
    assert optim is not None and {n.how for n in optim.names.values()} == {"recorded"}


@pytest.mark.parametrize("cid", UNIVERSAL)
def test_convert_writes_the_masters_as_zero_to_fp32(
    corpus: tuple[Path, dict[str, Any]], cid: str, tmp_path: Path
) -> None:
    path, case = _case(corpus, cid)
    plan = plan_conversion(path, tmp_path / "hf", to="hf")
    assert any("fp32 master weight(s) from zero/<param>/fp32.pt" in n for n in plan.notes)
    assert plan.fast_bytes == plan.total_bytes  # copied byte for byte from the fp32.pt files
    result = run_conversion(plan)
    assert result.verified, result.mismatches
    got = load_file(tmp_path / "hf" / "model.safetensors")
    ref = load_file(corpus[0] / case["zero_to_fp32"]["path"])
    assert set(got) == set(ref)
    for name, t in ref.items():
        assert got[name].dtype == t.dtype == torch.float32, name
        assert torch.equal(got[name].view(torch.int32), t.view(torch.int32)), name
    if case["bf16"]:  # the masters, not the bf16 module copy cast up
        module = open_checkpoint(path).parts[MODEL]
        cast = {n: module.load(f"module.{n}").float() for n in ref}
        assert any(not torch.equal(cast[n], ref[n]) for n in ref)


def test_a_save_folder_with_only_latest_universal(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, case = _case(corpus, "zero1_bf16_universal")
    run = shutil.copytree(path.parent, tmp_path / "run")
    shutil.rmtree(run / "global_step4")
    (run / "latest").unlink()
    view = open_checkpoint(run)
    assert view.family == "deepspeed-universal"
    assert view.detection.evidence[0] == (
        "'latest_universal' names tag 'global_step4_universal' (no 'latest')"
    )
    assert f"global_step4_universal/{OPTIM}" in view.parts
    assert "latest_universal" in {f.path for f in view.files}
    truth = {"global_step4_universal/zero": _truth(corpus, "zero1_bf16_universal")}
    checks, _ = check_names(run, view, truth)
    assert Counter(c.verdict for c in checks) == {"right": 16}
    result = run_conversion(plan_conversion(run, tmp_path / "hf", to="hf"))
    assert result.verified
    ref = load_file(corpus[0] / case["zero_to_fp32"]["path"])
    got = load_file(tmp_path / "hf" / "model.safetensors")
    assert all(torch.equal(got[n], t) for n, t in ref.items()) and set(got) == set(ref)
    (run / "latest").write_text("global_step9")  # names a tag that is not there
    assert detect_format(run).family == "deepspeed-universal"


def test_listing_imports_no_torch(corpus: tuple[Path, dict[str, Any]]) -> None:
    path, _ = _case(corpus, "zero2_bf16_universal")
    code = (
        "import sys; from ckpt_explorer import open_checkpoint; "
        "from ckpt_explorer.inspect_report import inspect_report; "
        f"inspect_report(open_checkpoint({str(path)!r})); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]


# ---------------------------------------------------------------------------------------------
# HF Trainer + ZeRO-2 / ZeRO-3 checkpoints converted to universal here (a config.json beside)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trainer_universal(
    real_checkpoints: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, dict[str, str]]]:
    root, manifest = real_checkpoints("realworld_trainer_ds")
    out = tmp_path_factory.mktemp("trainer_universal")
    made: dict[str, tuple[Path, dict[str, str]]] = {}
    for stage in ("zero2", "zero3"):
        case = manifest["cases"][f"ds_{stage}_step4"]
        made[stage] = (
            shutil.copytree(Path(root) / case["path"], out / stage),
            next(iter(case["id_names"].values())),
        )
    env = {**os.environ, "DS_ACCELERATOR": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", DS_CHILD, *(str(p) for p, _ in made.values())],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return made


@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_trainer_universal_converts_and_loads_in_transformers(
    trainer_universal: dict[str, tuple[Path, dict[str, str]]], stage: str, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    ckpt, truth = trainer_universal[stage]
    folder = ckpt / "global_step4_universal"
    assert detect_format(ckpt).family == "training-state"  # the Trainer's state, 'latest' tag
    view = open_checkpoint(folder)
    assert view.family == "deepspeed-universal" and view.values["zero_stage"] == int(stage[-1])
    gathered = load_file(ckpt / "model.safetensors")  # the Trainer's own gathered weights
    shapes = {r.name: tuple(r.shape) for r in view.parts[MASTERS].tensors}
    assert shapes == {n: tuple(t.shape) for n, t in gathered.items()}  # ZeRO-3 files are flat
    checks, missing = check_names(folder, view, {"zero": truth})
    assert not missing and Counter(c.verdict for c in checks) == {"right": len(truth)}
    optim = view.parts[OPTIM]
    steps = {float(optim.load(r.name)) for r in optim.tensors if r.name.endswith(".step")}
    assert steps == {4.0}  # ZeRO-3: from optimizer_state.pt, per parameter group
    out = tmp_path / "hf"
    plan = plan_conversion(folder, out, to="hf")
    assert [dst for _, dst in plan.copies] == ["config.json", "generation_config.json"]
    assert run_conversion(plan).verified
    ref = load_file(Path(f"{ckpt}.fp32") / "model.safetensors")
    got = load_file(out / "model.safetensors")
    assert set(got) == set(ref) and all(torch.equal(got[n], t) for n, t in ref.items())
    loaded = AutoModelForCausalLM.from_pretrained(out).state_dict()
    assert all(torch.equal(loaded[n], t) for n, t in ref.items())


def _module_of(view: CheckpointView) -> CheckpointView:
    return next(p for n, p in view.parts.items() if n.endswith("_model_states.pt"))


def test_zero3_module_placeholders_read_from_the_masters(
    trainer_universal: dict[str, tuple[Path, dict[str, str]]],
) -> None:
    view = open_checkpoint(trainer_universal["zero3"][0] / "global_step4_universal")
    assert any("ZeRO-3 placeholders" in w for w in view.warnings)
    masters = view.parts[MASTERS]
    for r in _module_of(view).tensors:
        name = r.name.removeprefix("module.")
        assert torch.equal(_module_of(view).load(r.name), masters.load(name).to(torch.float32))
    assert inspect_report(view)["parameter_count"] == sum(r.numel for r in masters.tensors)


def test_args_saved_in_the_model_states_are_an_args_part(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """Megatron-DeepSpeed saves its ``args`` Namespace into the model states (copied into the
    universal folder): it is the args part, never run, read as an inert object."""
    import argparse

    path, _ = _case(corpus, "zero2_fp32_universal")
    folder = shutil.copytree(path, tmp_path / "global_step4_universal")
    states = torch.load(folder / MODEL, weights_only=False)  # the test's own trusted copy
    states["args"] = argparse.Namespace(seed=7, lr=1e-3, train_iters=100, micro_batch_size=2)
    torch.save(states, folder / MODEL)
    view = open_checkpoint(folder)
    args = view.parts[f"{MODEL}:args"]
    assert args.kind == "args" and args.values["seed"] == 7 and args.values["train_iters"] == 100
