"""torchtune output folders (readers/torchtune/folder*.py) on the real torchtune 0.6.1 runs of the
realworld_tune corpus: the full and the LoRA single-device recipes with FullModelHFCheckpointer.

The manifest holds the truth: per case the epoch folder the recipe state belongs to
(``latest_epoch_dir``), ``epochs_run``, the optimizer step, torchtune's own state_dict
(``model_tensors``: names, shapes, sums), the optimizer ids' true names (torchtune's names,
``id_names``) and ``hf_names`` (torchtune name -> the HF / PEFT key it is saved under).
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from realworld_check import check_names
from safetensors import safe_open

from ckpt_explorer import detect_format, open_checkpoint
from ckpt_explorer.formats import specs
from ckpt_explorer.inspect_report import inspect_report

sys.path.insert(0, str(Path(__file__).parent.parent / "fixture_makers"))
from realworld_tune_maker import planned_cases

CASES = sorted(planned_cases())
RECIPE = "recipe_state/recipe_state.pt"
SHARD = "model-00001-of-00001.safetensors"


@pytest.fixture(scope="module")
def corpus(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints("realworld_tune")
    return Path(root), manifest


def _case(corpus: tuple[Path, dict[str, Any]], cid: str) -> tuple[Path, dict[str, Any]]:
    return corpus[0] / corpus[1]["cases"][cid]["path"], corpus[1]["cases"][cid]


@pytest.mark.parametrize("cid", CASES)
def test_detected_with_the_epoch_of_its_recipe_state(
    corpus: tuple[Path, dict[str, Any]], cid: str
) -> None:
    path, case = _case(corpus, cid)
    detection = detect_format(path)
    assert (detection.family, detection.kind) == ("torchtune", "training_state")
    epoch = case["latest_epoch_dir"]
    assert any(f"epochs_run {case['epochs_run']} → {epoch}" in e for e in detection.evidence)
    assert any("no LR scheduler state" in e for e in detection.evidence)
    assert detection.detail.endswith(" (LoRA)") == cid.startswith("lora")
    order = [s.name for s in specs("dir")]
    assert order.index("torchtune") < order.index("training-state")


@pytest.mark.parametrize("cid", CASES)
def test_parts_roles_and_run_position(corpus: tuple[Path, dict[str, Any]], cid: str) -> None:
    path, case = _case(corpus, cid)
    view = open_checkpoint(path)
    epoch = case["latest_epoch_dir"]
    want = {
        epoch: "model",
        f"{RECIPE}:optimizer": "optimizer",
        f"{RECIPE}:run_state": "running_state",
        "torchtune_config.yaml": "args",
    }
    if cid.startswith("lora"):
        want[f"{epoch}/adapter_model.pt"] = "adapter"
    assert {n: p.kind for n, p in view.parts.items()} == want
    run = view.parts[f"{RECIPE}:run_state"].values
    assert run["epochs_run"] == view.values["epochs_run"] == case["epochs_run"]
    assert run["total_epochs"] == 4 and run["max_steps_per_epoch"] == 2 and run["seed"] == 1234
    assert run["dataloader"]["_num_yielded"] == 2  # the dataloader state as saved
    optim = view.parts[f"{RECIPE}:optimizer"]
    steps = {float(optim.load(r.name)) for r in optim.tensors if r.name.endswith(".step")}
    assert steps == {case["optimizer_step"]}
    assert optim.optimizer is not None
    assert [g["lr"] for g in optim.optimizer.param_groups] == case["lr"]
    config = view.parts["torchtune_config.yaml"].values
    assert config["checkpointer"]["model_type"] == view.values["model_type"] == "LLAMA2"
    saved = [p for p in view.parts.values() if p.kind != "args"]  # the config names its class
    assert "lr_scheduler" not in {k.split(".")[0] for p in saved for k in p.values}


@pytest.mark.parametrize("cid", CASES)
def test_listing_equals_the_files(corpus: tuple[Path, dict[str, Any]], cid: str) -> None:
    path, case = _case(corpus, cid)
    view = open_checkpoint(path)
    epoch = case["latest_epoch_dir"]
    on_disk = {f"{epoch}/{p.name}": p.stat().st_size for p in (path / epoch).iterdir()}
    on_disk[RECIPE] = (path / RECIPE).stat().st_size
    on_disk["torchtune_config.yaml"] = (path / "torchtune_config.yaml").stat().st_size
    assert {f.path: f.nbytes for f in view.files} == on_disk
    with safe_open(str(path / epoch / SHARD), "pt") as f:
        saved = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    assert {r.name: tuple(r.shape) for r in view.tensors} == {
        f"model/{k}": s for k, s in saved.items()
    }
    assert {r.file for r in view.tensors} == {f"{epoch}/{SHARD}"}
    truth = case["model_tensors"]  # torchtune's own state_dict at the save
    for tune, hf in case["hf_names"].items():
        if "lora_" in tune:
            adapter = view.parts[f"{epoch}/adapter_model.pt"]
            rec, loaded = adapter.record(tune), adapter.load(tune)
        else:
            rec, loaded = view.record(f"model/{hf}"), view.load(f"model/{hf}")
        assert list(rec.shape) == truth[tune]["shape"] and rec.dtype == truth[tune]["dtype"]
        if cid.startswith("full") or "lora_" in tune:  # a LoRA epoch's shards hold merged weights
            got = float(loaded.double().sum())  # q/k rows permuted back: the same sum
            assert math.isclose(got, truth[tune]["sum"], rel_tol=1e-6, abs_tol=1e-6), tune
    # torchtune's model: base weights (+ LoRA parameters), optimizer moments never counted
    n = sum(math.prod(t["shape"]) for t in truth.values())
    assert inspect_report(view)["parameter_count"] == n


@pytest.mark.parametrize("cid", CASES)
def test_optimizer_ids_named_by_torchtune_names(
    corpus: tuple[Path, dict[str, Any]], cid: str
) -> None:
    path, case = _case(corpus, cid)
    view = open_checkpoint(path)
    checks, missing = check_names(path, view, case["id_names"])
    counts = Counter(c.verdict for c in checks)
    assert not missing and counts == {"right": len(case["id_names"][RECIPE])}, counts
    optim = view.parts[f"{RECIPE}:optimizer"].optimizer
    assert optim is not None and {n.how for n in optim.names.values()} == {"aligned"}
    assert "torchtune's module order" in optim.name_source


@pytest.mark.parametrize("cid", ["full_base", "lora_resume_clean"])
def test_recipe_state_file_alone(corpus: tuple[Path, dict[str, Any]], cid: str) -> None:
    path, case = _case(corpus, cid)
    view = open_checkpoint(path / RECIPE)
    assert (view.family, view.kind) == ("torchtune", "training_state")
    assert {n: p.kind for n, p in view.parts.items()} == {
        "optimizer": "optimizer",
        "(run position)": "running_state",
    }
    checks, _ = check_names(path, view, case["id_names"])
    assert Counter(c.verdict for c in checks) == {"right": len(case["id_names"][RECIPE])}


def test_epochs_newer_than_the_recipe_state(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, case = _case(corpus, "full_base")
    run = shutil.copytree(path, tmp_path / "run")
    shutil.copytree(run / "epoch_1", run / "epoch_3")  # the final epoch: saved without a state
    view = open_checkpoint(run)
    assert "epoch_1" in view.parts and "epoch_3" not in view.parts
    assert any(w.startswith("epoch_3 newer than the recipe state") for w in view.warnings)
    shutil.rmtree(run / "epoch_1")  # the recipe state's epoch gone: the largest one, said so
    view = open_checkpoint(run)
    assert "epoch_3" in view.parts
    assert any("names no epoch folder" in w for w in view.warnings)
    checks, _ = check_names(run, view, case["id_names"])
    assert Counter(c.verdict for c in checks)["wrong"] == 0


def test_another_architecture_names_no_id(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, case = _case(corpus, "lora_base")
    run = shutil.copytree(path, tmp_path / "run")
    config = run / "torchtune_config.yaml"
    config.write_text(config.read_text().replace("model_type: LLAMA2", "model_type: PHI3_MINI"))
    view = open_checkpoint(run)
    assert any(w.startswith("optimizer ids not named: model_type PHI3_MINI") for w in view.warnings)
    checks, _ = check_names(run, view, case["id_names"])
    assert Counter(c.verdict for c in checks) == {"unknown": len(case["id_names"][RECIPE])}
    config.unlink()  # no config: the table alone decides, the adapter from its PEFT keys
    (run / "epoch_1" / "adapter_model.pt").unlink()
    view = open_checkpoint(run)
    assert "epoch_1/adapter_model.safetensors" in view.parts
    checks, _ = check_names(run, view, case["id_names"])
    assert Counter(c.verdict for c in checks) == {"right": len(case["id_names"][RECIPE])}


def test_listing_imports_no_torch(corpus: tuple[Path, dict[str, Any]]) -> None:
    path, _ = _case(corpus, "lora_base")
    code = (
        "import sys; from ckpt_explorer import open_checkpoint; "
        "from ckpt_explorer.inspect_report import inspect_report; "
        f"inspect_report(open_checkpoint({str(path)!r})); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]
