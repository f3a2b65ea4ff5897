"""Words that do not contradict what they describe: loader verdicts, the resume doctor's
causes and facts (page and CLI), Convert's log and titles, the module tree's counts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ckpt_explorer.ui.state import AppState


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo: a state resumed without its LR scheduler (torch, a real training loop)."""
    from ckpt_explorer.demo import make_demo

    return make_demo(tmp_path_factory.mktemp("words") / "demo")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from safetensors.torch import save_file

    path = tmp_path_factory.mktemp("model") / "model.safetensors"
    save_file({f"layers.{i}.w": torch.full((4, 8), float(i)) for i in range(12)}, str(path))
    return path


def test_a_failing_loader_reads_with_its_own_mark_only(model_file: Path) -> None:
    from ckpt_explorer import open_checkpoint
    from ckpt_explorer.ui.components.common import CARD_CSS
    from ckpt_explorer.ui.components.loaders import loaders_block

    # safetensors bytes under a .bin name: torch.load (which hands only a .safetensors suffix
    # to safetensors) fails on it
    misnamed = model_file.with_name("pytorch_model.bin")
    misnamed.write_bytes(model_file.read_bytes())
    [card] = loaders_block(open_checkpoint(misnamed))
    body = str(card.objects[0].object)
    fails = [li for li in re.findall(r"<li>(.*?)</li>", body) if "✗" in li]
    assert fails, body
    classes = re.findall(r"<ul class='([^']+)'", body)
    assert classes and not any(f".{c} li::before" in CARD_CSS for c in classes)  # no "✓ ✗"


def test_doctor_lists_the_parts_disagreement_as_the_cause_s_symptom(demo: Path) -> None:
    from ckpt_explorer.resume import resume_doctor

    report = resume_doctor(demo / "resumed_from", demo / "after_resume", compare_weights=False)
    names = [c.cause for c in report.causes]
    assert names[0] == "scheduler_not_restored"
    assert "step_mismatch_between_parts" not in names  # not a second cause
    assert any("so B's own parts disagree" in e for e in report.causes[0].evidence)
    text = report.format_text()
    assert "optimizer step: A 6  B 8  (expected 8: as expected)" in text
    assert "scheduler steps: A 6  B 2  (expected 8: NOT as expected)" in text


def test_doctor_says_not_recorded_rather_than_none(model_file: Path, tmp_path: Path) -> None:
    import shutil

    from ckpt_explorer.resume import resume_doctor

    other = tmp_path / "other.safetensors"
    shutil.copyfile(model_file, other)
    text = resume_doctor(model_file, other, compare_weights=False).format_text()
    assert "None" not in text
    assert "optimizer step: A not recorded  B not recorded" in text


def test_convert_log_shows_the_write_at_100_and_the_title_follows(model_file: Path) -> None:
    from ckpt_explorer.ui.components.convert import ConvertView

    app = AppState(model_file.parent)
    assert app.browse.open(model_file.name)
    view = ConvertView(app=app)
    c = app.convert
    c.param.update(target="bin", destination="out/model.bin")  # a folder made for it
    assert "nothing is written yet" not in view._plan_card.title
    assert c.make_plan(), c.error
    assert view._plan_card.title == "2 · The plan (nothing is written yet)"
    c.run(wait=True)
    assert c.result is not None and c.result.verified, c.error
    log = c.log
    written = next(i for i, line in enumerate(log) if "written:" in line)
    assert log[written].startswith("100.0%") and "in 1 file" in log[written]
    assert any("verifying" in line for line in log[written + 1 :])
    assert "installed at out/model.bin" in log[-1]
    assert "nothing is written yet" not in view._plan_card.title
    assert "written and verified" in view._plan_card.title


def test_module_tree_counts_elements_not_params() -> None:
    from ckpt_explorer.ui.components.module_tree import TREE_ESM, node_row
    from ckpt_explorer.ui.module_index import ModuleNode

    row: dict[str, Any] = node_row(ModuleNode("opt/", "opt", 2, 64, 256, (("float32", 2),)))
    assert row["elements"] == "64" and "params" not in row
    assert ">params<" not in TREE_ESM and ">elements<" in TREE_ESM


def test_a_sharded_output_is_not_named_like_a_file(model_file: Path) -> None:
    app = AppState(model_file.parent)
    assert app.browse.open(model_file.name)
    c = app.convert
    c.param.update(target="safetensors", max_shard_size="1KB")
    c.destination = c.suggest_destination()
    assert c.destination == "model-safetensors"
    assert c.make_plan(), c.error
    assert c.plan.output_is_dir and len(c.plan.files) > 1
    c.max_shard_size = ""
    assert c.suggest_destination() == "model-safetensors.safetensors"
