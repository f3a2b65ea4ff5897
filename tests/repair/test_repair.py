"""``repair``: each rebuilt file equals what the real writer wrote (byte for byte where the
writer's output is deterministic), the real loader then loads the folder, and refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from loadable_cases import run_all

from ckpt_explorer.cli import main
from ckpt_explorer.repair import plan_repair


@pytest.fixture(scope="module")
def state(real_checkpoints: Any) -> dict[str, Any]:
    return run_all(real_checkpoints)


ORIGINAL = {
    "cai_optim_noindex_repaired": ("cai_state", "optimizer/pytorch_optim.bin.index.json"),
    "cai_model_noindex_repaired": ("cai_state", "modeling/pytorch_model.bin.index.json"),
    "ds_nolatest_repaired": ("ds_ok", "latest"),
}


def test_repaired_files_equal_the_writers_own(state: dict[str, Any]) -> None:
    for name, (_plan, result) in state["repairs"].items():
        assert result.verified, (name, result.checks)
        if name in ORIGINAL:
            case, rel = ORIGINAL[name]
            assert result.path.read_bytes() == (state["cases"][case] / rel).read_bytes(), name
    plan, _ = state["repairs"]["hf_noindex_repaired"]
    mine = json.loads(plan.content)
    theirs = json.loads((state["cases"]["hf_ok"] / "model.safetensors.index.json").read_text())
    assert mine["weight_map"] == theirs["weight_map"]
    assert mine["metadata"]["total_size"] == theirs["metadata"]["total_size"]


def test_repaired_folders_load_with_the_real_loader(state: dict[str, Any]) -> None:
    for name in state["repairs"]:
        meant = [v for v in state["tables"][name].verdicts if v.meant]
        assert meant, name
        for v in meant:
            assert state["results"][f"{name}|{v.loader}|{v.target}"]["ok"], (name, v.loader)


def test_refusals_and_cli(state: dict[str, Any], tmp_path: Path, capsys: Any) -> None:
    ds = shutil.copytree(state["cases"]["ds_nolatest"], tmp_path / "ds")
    shutil.copytree(ds / "global_step2", ds / "global_step9")
    assert "2 tags" in plan_repair(ds).refused
    opt = shutil.copytree(state["cases"]["cai_optim_noindex"], tmp_path / "opt")
    (opt / "pytorch_optim_group.bin").unlink()
    assert "param-group file" in plan_repair(opt).refused
    hf = shutil.copytree(state["cases"]["hf_noindex"], tmp_path / "hf")
    (hf / "model-00003-of-00004.safetensors").unlink()
    assert "00003 of 00004 are missing" in plan_repair(hf).refused
    assert main(["repair", str(hf)]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert main(["repair", str(state["cases"]["dcp_nometa"])]) == 2
    assert main(["repair", str(state["cases"]["hf_ok"])]) == 2  # nothing damaged
    m = shutil.copytree(state["cases"]["cai_model_noindex"], tmp_path / "m")
    assert (
        main(["repair", str(m), "--dry-run"]) == 0
        and not (m / "pytorch_model.bin.index.json").exists()
    )
    assert main(["repair", str(m)]) == 0
    assert (m / "pytorch_model.bin.index.json").is_file()
    assert "verified" in capsys.readouterr().out
    assert main(["repair", str(m)]) == 2  # nothing damaged any more
