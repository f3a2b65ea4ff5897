"""The CLI says what the dashboard says: natural order of names, the byte formatter of
readable.py, names said once, steps whose source is told in words; convert makes the output's
missing folders (and leaves none behind when nothing is installed)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer.cli import main

LAYERS = 12


def _model(path: Path, shift: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({f"layers.{i}.w": torch.full((64, 32), i + shift) for i in range(LAYERS)}, str(path))
    return path


def test_inspect_lists_names_in_natural_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _model(tmp_path / "model.safetensors")
    assert main(["inspect", str(path)]) == 0
    listed = [
        line.split()[0]
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("layers.")
    ]
    assert listed == [f"layers.{i}.w" for i in range(LAYERS)]  # not 0, 1, 10, 11, 2


def test_timeline_says_where_a_step_comes_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for step in (0, 100):
        _model(tmp_path / "run" / f"checkpoint-{step}" / "model.safetensors", step)
    assert main(["timeline", str(tmp_path / "run"), "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "name!" not in out and "0name" not in out
    rows = [line.split() for line in out.splitlines() if "checkpoint-" in line]
    assert [r[:3] for r in rows[:2]] == [
        ["0", "(name)", "checkpoint-0"],
        ["100", "(name)", "checkpoint-100"],
    ]
    assert "(name): the step is read from the checkpoint's name" in out


def _dcp_state(folder: Path, steps: int) -> None:
    """A torch.distributed.checkpoint save of a model and its AdamW state, the optimizer
    flattened (keyed by parameter name, as torchtitan saves it)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(steps):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    options = StateDictOptions(flatten_optimizer_state_dict=True)
    msd, osd = get_state_dict(model, opt, options=options)
    dcp.save({"model": msd, "optimizer": osd}, checkpoint_id=str(folder))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_diff_says_each_name_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _dcp_state(tmp_path / "a", 1)
    _dcp_state(tmp_path / "b", 2)
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--limit", "100"]) == 1
    rows = [line for line in capsys.readouterr().out.splitlines() if "exp_avg" in line]
    assert rows
    for line in rows:
        name = line.split()[-1]  # optimizer.state.0.weight.exp_avg: its parameter is in it
        assert "[" not in line, line
        assert name.startswith("optimizer.state.")


def test_convert_makes_the_missing_folders_and_says_sizes_readably(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _model(tmp_path / "model.safetensors")
    out = tmp_path / "new" / "deeper" / "model.bin"
    assert main(["convert", str(src), str(out), "--to", "bin"]) == 0
    printed = capsys.readouterr().out
    assert out.is_file()
    assert "96.0 KiB of tensors" in printed and "98304" not in printed  # 12 x 64 x 32 x 4 B


def test_a_cancelled_conversion_leaves_no_folder_behind(tmp_path: Path) -> None:
    from ckpt_explorer.convert import ConversionCancelled, plan_conversion, run_conversion

    src = _model(tmp_path / "model.safetensors")
    plan = plan_conversion(src, tmp_path / "new" / "deeper" / "out", "safetensors")
    stop = threading.Event()
    stop.set()
    with pytest.raises(ConversionCancelled):
        run_conversion(plan, cancel=stop)
    assert not (tmp_path / "new").exists()


def test_convert_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    from ckpt_explorer.convert import plan_conversion
    from ckpt_explorer.errors import CkptExplorerError

    src = _model(tmp_path / "model.safetensors")
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(CkptExplorerError, match="a folder"):
        plan_conversion(src, tmp_path / "taken" / "out.bin", "bin")
