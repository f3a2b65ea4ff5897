"""``ckpt-explorer diff``: exit codes 0/1/2, JSON keys, human output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer.cli import main


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    g = torch.Generator().manual_seed(0)
    sd = {f"model.layers.{i}.w": torch.randn(32, 32, generator=g) for i in range(3)}
    save_file(sd, str(tmp_path / "a.safetensors"))
    torch.save({k: v.clone() for k, v in sd.items()}, tmp_path / "same.bin")
    other = {k: v.clone() for k, v in sd.items()}
    other["model.layers.1.w"][0, 0] += 1.0
    other["model.layers.2.w"] += 1e-3
    torch.save(other, tmp_path / "other.bin")
    return tmp_path / "a.safetensors", tmp_path / "same.bin", tmp_path / "other.bin"


def test_exit_0_when_equal(
    pair: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, same, _ = pair
    assert main(["diff", str(a), str(same)]) == 0
    assert "EQUAL" in capsys.readouterr().out


def test_exit_1_when_different_and_sorted_by_rel_l2(
    pair: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, _, other = pair
    assert main(["diff", str(a), str(other)]) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT" in out
    assert out.index("model.layers.1.w") < out.index("model.layers.2.w")  # larger rel L2 first
    assert main(["diff", str(a), str(other), "--atol", "2"]) == 0


def test_json_keys(pair: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, _, other = pair
    assert main(["diff", str(a), str(other), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert {"summary", "tensors", "values", "by_layer", "by_module"} <= set(data)
    s = data["summary"]
    assert {"identical", "compared", "changed", "only_in_a", "only_in_b"} <= set(s)
    assert (s["identical"], s["compared"], s["changed"]) == (1, 3, 2)
    row = next(t for t in data["tensors"] if t["name"] == "model.layers.1.w")
    for key in (
        "status",
        "max_abs",
        "mean_abs",
        "rel_l2",
        "cosine",
        "n_outside",
        "nan_a",
        "nan_b",
        "inf_a",
        "inf_b",
        "norm_a",
        "norm_b",
    ):
        assert key in row
    assert row["max_abs"] == pytest.approx(1.0)
    assert row["n_outside"] == 1


def test_rename_option(tmp_path: Path, pair: tuple[Path, Path, Path]) -> None:
    a, _, _ = pair
    g = torch.Generator().manual_seed(0)
    sd = {f"net.blocks.{i}.w": torch.randn(32, 32, generator=g) for i in range(3)}
    torch.save(sd, tmp_path / "renamed.bin")
    assert main(["diff", str(tmp_path / "renamed.bin"), str(a)]) == 1
    assert (
        main(
            ["diff", str(tmp_path / "renamed.bin"), str(a), "--rename", "net.blocks.=model.layers."]
        )
        == 0
    )


def test_exit_2_on_unreadable_input(
    tmp_path: Path, pair: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, _, _ = pair
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"not a checkpoint at all" * 10)
    assert main(["diff", str(a), str(garbage)]) == 2
    assert main(["diff", str(a), str(tmp_path / "missing")]) == 2
    truncated = tmp_path / "trunc.safetensors"
    truncated.write_bytes(a.read_bytes()[:-100])
    assert main(["diff", str(a), str(truncated)]) == 2
    assert main(["diff", str(a), str(a), "--rename", "nonsense"]) == 2
    err = capsys.readouterr().err
    assert err.count("ckpt-explorer: error:") == 4
