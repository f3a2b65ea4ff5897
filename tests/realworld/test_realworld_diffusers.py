"""diffusers outputs: model folders, a pipeline root and train_unconditional's training states.

The outputs come from tests/fixture_makers/realworld_diffusers_maker.py (the real diffusers and
accelerate); tests/realworld_check.py scores validate and the optimizer names against its truth.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from realworld_check import (
    assert_state_holds,
    check_resume,
    check_state,
    resume_problems,
    state_problems,
)

from ckpt_explorer import detect_format, open_checkpoint
from ckpt_explorer.cli import main
from ckpt_explorer.timeline import build_timeline
from ckpt_explorer.validate.parts import collect

MAKER = "realworld_diffusers"
MODELS = [
    "diffusers_unet_safetensors",
    "diffusers_unet_bin",
    "diffusers_unet_sharded",
    "diffusers_unet_ema",
    "diffusers_pipe_st_unet",
    "diffusers_pipe_st_vae",
    "diffusers_pipe_bin_unet",
    "diffusers_pipe_bin_vae",
]
STATES = ["diffusers_step2", "diffusers_step4", "diffusers_resume_step6"]
WEIGHTS = "diffusion_pytorch_model.safetensors"
# diffusers imports peft's newer helpers when peft is importable; the fixture env pins an older
# peft, so the real client runs without it (the models do not use it).
LOAD_UNET = """
import sys
sys.modules["peft"] = None
import torch
from diffusers import UNet2DModel
from safetensors.torch import load_file
model = UNet2DModel.from_pretrained(sys.argv[1])
want = load_file(sys.argv[2])
got = model.state_dict()
assert set(got) == set(want), sorted(set(got) ^ set(want))[:5]
assert all(torch.equal(got[k], want[k]) for k in want)
print("loaded", type(model).__name__, len(got))
"""


@pytest.fixture(scope="module")
def corpus(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    root, manifest = real_checkpoints(MAKER)
    return Path(root), manifest


def test_corpus_cases(corpus: tuple[Path, dict[str, Any]]) -> None:
    """Every case listed here is made, with the corpus contract's keys."""
    _, manifest = corpus
    cases = manifest["cases"]
    assert sorted(cases) == sorted(MODELS + STATES)
    for cid, case in cases.items():
        assert case["setup"] and case["expect"] == "clean", cid
    assert all(cases[c]["id_names"]["optimizer.bin"] for c in STATES)
    assert cases["diffusers_resume_step6"]["resume_of"] == "diffusers_step4"


@pytest.mark.parametrize("case_id", MODELS)
def test_model_folder_is_listed_as_diffusers_holds_it(
    corpus: tuple[Path, dict[str, Any]], case_id: str
) -> None:
    """safetensors, .bin and sharded save_pretrained folders open as HF model folders with
    their config; names, dtypes, shapes and values are the model's state_dict."""
    root, manifest = corpus
    case = manifest["cases"][case_id]
    path = root / case["path"]
    detection = detect_format(path)
    assert (detection.family, detection.kind) == (case["family"], case["kind"])
    view = open_checkpoint(path)
    listed = {r.name: r for r in view.tensors}
    assert set(listed) == set(case["tensors"])
    for name, want in case["tensors"].items():
        assert (listed[name].dtype, list(listed[name].shape)) == (want["dtype"], want["shape"])
        got = float(view.load(name).double().sum())
        assert math.isclose(got, want["sum"], rel_tol=1e-9, abs_tol=1e-12), name
    if case["family"] == "hf-single":
        assert view.values["config.json"]["_class_name"] in ("UNet2DModel", "AutoencoderKL")
        assert any("config.json: diffusers" in e for e in detection.evidence), detection.evidence
    ema_lines = [e for e in detection.evidence if "EMA" in e]
    assert bool(ema_lines) == bool(case.get("ema")), detection.evidence
    assert (detection.detail == "EMA copy") == bool(case.get("ema"))


@pytest.mark.parametrize("variant", ["pipe_st", "pipe_bin"])
def test_pipeline_root_names_its_model_folders(
    corpus: tuple[Path, dict[str, Any]], variant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pipeline root is no checkpoint: one error line says which subfolders hold models."""
    root, manifest = corpus
    case = manifest["cases"][f"diffusers_{variant}_unet"]
    pipe = root / case["pipeline_root"]
    assert main(["inspect", str(pipe)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "diffusers pipeline" in err
    assert "unet/ (UNet2DModel)" in err and "vae/ (AutoencoderKL)" in err
    assert "without weights: scheduler/ (DDPMScheduler)" in err
    assert f"inspect {pipe / 'unet'}" in err


@pytest.mark.parametrize("case_id", STATES)
def test_state_parts_model_and_ema(corpus: tuple[Path, dict[str, Any]], case_id: str) -> None:
    """train_unconditional's checkpoint-N: a training state whose model part is unet/ and whose
    unet_ema/ is said to be an EMA copy; the checks and the names use unet/, not the EMA."""
    root, manifest = corpus
    case = manifest["cases"][case_id]
    view = open_checkpoint(root / case["path"])
    assert (view.family, view.kind) == (case["family"], case["kind"])
    assert {n: p.kind for n, p in view.parts.items()} == {
        "unet": "model",
        "unet_ema": "model",
        "optimizer.bin": "optimizer",
        "scheduler.bin": "scheduler",
        "random_states_0.pkl": "rng",
    }
    assert view.parts["unet_ema"].detection.detail == "EMA copy"
    assert view.parts["unet"].detection.detail != "EMA copy"
    assert any(e.startswith("unet_ema → an EMA copy") for e in view.detection.evidence)
    assert not any(e.startswith("unet → an EMA") for e in view.detection.evidence)
    assert [m.label for m in collect(view).models] == ["unet/", "unet_ema/"]
    source = view.parts["optimizer.bin"].optimizer.name_source
    assert "unet_ema" not in source and ("of unet" in source or "UNet2DModel" in source)


def test_ema_named_first_is_still_the_ema(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """The save hook may name the EMA folder anything: one that sorts before unet/ is still
    told by its config (EMAModel's fields), and unet/ stays the model the checks use."""
    root, manifest = corpus
    state = tmp_path / "checkpoint-4"
    shutil.copytree(root / manifest["cases"]["diffusers_step4"]["path"], state)
    (state / "unet_ema").rename(state / "averaged")
    view = open_checkpoint(state)
    assert view.parts["averaged"].detection.detail == "EMA copy"
    assert [m.label for m in collect(view).models] == ["unet/", "averaged/"]
    assert "averaged" not in view.parts["optimizer.bin"].optimizer.name_source
    result = check_state(
        tmp_path, "renamed", {**manifest["cases"]["diffusers_step4"], "path": state.name}
    )
    assert not state_problems(result), result.describe()


@pytest.mark.parametrize("case_id", STATES)
def test_state_verdicts(corpus: tuple[Path, dict[str, Any]], case_id: str) -> None:
    """Clean states: no error/warning finding; optimizer ids never named wrong."""
    result = assert_state_holds(*corpus, case_id)
    assert result.verdict_counts()["right"] > 0, result.describe()


def test_resume_verdict(corpus: tuple[Path, dict[str, Any]]) -> None:
    """The correct resume (load_state of checkpoint-4, saved at 6): no cause scores >= 0.5."""
    root, manifest = corpus
    result = check_resume(root, manifest, "diffusers_resume_step6")
    problems = resume_problems(result)
    assert not problems, "\n".join([result.describe(), *problems])


def _ratio(a: Path, b: Path, names: list[str]) -> float:
    from safetensors.torch import load_file

    ta, tb = load_file(a / WEIGHTS), load_file(b / WEIGHTS)
    diff = sum(float((tb[n].double() - ta[n].double()).norm()) ** 2 for n in names)
    return math.sqrt(diff / sum(float(ta[n].double().norm()) ** 2 for n in names))


def test_timeline_gives_unet_update_ratios(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """The run folder (checkpoint-2, -4, -6 with a resume): update ratios of unet/ as the files
    give them, the EMA's not mixed into the model's layers, no anomaly."""
    root, manifest = corpus
    run = (root / manifest["cases"]["diffusers_step2"]["path"]).parent
    timeline = build_timeline(run, cache_dir=tmp_path)
    assert [c.step for c in timeline.checkpoints] == [2, 4, 6]
    assert [a for a in timeline.anomalies if a.severity in ("error", "warning")] == []
    for pair in timeline.pairs:
        a, b = (
            run / f"checkpoint-{pair.step_a}" / "unet",
            run / f"checkpoint-{pair.step_b}" / "unet",
        )
        for name in ("conv_out.weight", "down_blocks.1.attentions.0.to_q.weight"):
            assert math.isclose(pair.ratios[f"unet/{name}"], _ratio(a, b, [name]), rel_tol=1e-6)
        layer = [k for k in pair.layers if k.rsplit("/", 1)[-1] == "conv_out" and "ema" not in k]
        assert len(layer) == 1, sorted(pair.layers)
        want = _ratio(a, b, ["conv_out.weight", "conv_out.bias"])
        assert math.isclose(pair.layers[layer[0]], want, rel_tol=1e-6), (pair.layers, want)


@pytest.mark.parametrize("shard", [None, "1MB"])
def test_convert_unet_loads_in_diffusers(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path, shard: str | None
) -> None:
    """``convert unet/ --to hf`` writes diffusers' file names: UNet2DModel.from_pretrained
    loads the output with the source's values (one file, and sharded with an index)."""
    root, manifest = corpus
    src = root / manifest["cases"]["diffusers_step4"]["path"] / "unet"
    dst = tmp_path / "unet_hf"
    args = ["convert", str(src), str(dst), "--to", "hf"]
    assert main(args + (["--max-shard-size", shard] if shard else [])) == 0
    names = sorted(p.name for p in dst.iterdir())
    if shard:
        assert "diffusion_pytorch_model.safetensors.index.json" in names, names
        assert sum(n.startswith("diffusion_pytorch_model-") for n in names) >= 2, names
    else:
        assert names == ["config.json", WEIGHTS]
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_UNET, str(dst), str(src / WEIGHTS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "loaded UNet2DModel" in proc.stdout


def test_model_only_conversion_of_the_checkpoint_takes_the_trained_unet(
    corpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """``convert checkpoint-N --to hf --model-only`` takes ``unet/`` (the EMA copy beside it is
    listed as left out): diffusers loads the output with the unet's own values."""
    root, manifest = corpus
    ckpt = root / manifest["cases"]["diffusers_step4"]["path"]
    dst = tmp_path / "model"
    assert main(["convert", str(ckpt), str(dst), "--to", "hf", "--model-only"]) == 0
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_UNET, str(dst), str(ckpt / "unet" / WEIGHTS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
