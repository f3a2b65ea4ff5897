"""Reader behaviour beyond listing: laziness, storage sharing, param names, bundles, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from ckpt_explorer import CkptExplorerError, detect_format, open_checkpoint
from ckpt_explorer.cli import main
from ckpt_explorer.demo import TinyLM, make_demo
from ckpt_explorer.io.mapped import MappedFile


class ConvNet(nn.Module):
    """Parameters interleaved with buffers, as in real models."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)
        self.head = nn.Linear(4, 4)


def _trained_adamw(model: nn.Module) -> torch.optim.Optimizer:
    opt = torch.optim.AdamW(
        [
            {"params": [model.conv.weight, model.conv.bias, model.bn.weight, model.bn.bias]},
            {
                "params": [model.fc.weight, model.fc.bias, model.head.weight, model.head.bias],
                "lr": 1e-2,
            },
        ]
    )
    for _ in range(2):
        x = model.bn(model.conv(torch.randn(2, 3, 6, 6))).mean((2, 3))
        model.head(model.fc(x)).sum().backward()
        opt.step()
    return opt


def test_listing_reads_no_tensor_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sd = {"a": torch.randn(32, 32), "b": torch.arange(10)}
    torch.save(sd, tmp_path / "m.bin")
    save_file(sd, tmp_path / "m.safetensors")

    def refuse(self: MappedFile, offset: int, nbytes: int) -> torch.Tensor:
        raise AssertionError("tensor bytes were read while listing")

    monkeypatch.setattr(MappedFile, "bytes_tensor", refuse)
    for name in ("m.bin", "m.safetensors"):
        view = open_checkpoint(tmp_path / name)
        assert {r.name: r.shape for r in view.tensors} == {"a": (32, 32), "b": (10,)}
        with pytest.raises(AssertionError, match="while listing"):
            view.load("a")


def test_offsets_point_at_the_tensor_bytes(tmp_path: Path) -> None:
    sd = {"a": torch.randn(8, 8), "b": torch.arange(5, dtype=torch.int64)}
    for name, write in (
        ("m.bin", lambda p: torch.save(sd, p)),
        ("m.st", lambda p: save_file(sd, p)),
    ):
        path = tmp_path / name
        write(path)
        raw = path.read_bytes()
        for r in open_checkpoint(path).tensors:
            assert raw[r.offset : r.offset + r.nbytes] == sd[r.name].numpy().tobytes(), (
                name,
                r.name,
            )


def test_shared_storage_and_views(tmp_path: Path) -> None:
    base = torch.randn(6, 4)
    sd = {"w": base, "tied": base, "t": base.t(), "rows": base[2:4], "col": base[:, 1]}
    torch.save(sd, tmp_path / "m.pt")
    view = open_checkpoint(tmp_path / "m.pt")
    keys = {r.name: r.storage_key for r in view.tensors}
    assert len(set(keys.values())) == 1
    for name, tensor in sd.items():
        assert torch.equal(view.load(name), tensor), name
    assert view.record("rows").offset == view.record("w").offset + 2 * 4 * 4


def test_optimizer_ids_get_parameter_names_from_the_model(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = ConvNet()
    opt = _trained_adamw(model)
    torch.save(model.state_dict(), tmp_path / "model.bin")
    torch.save(opt.state_dict(), tmp_path / "optim.bin")
    view = open_checkpoint(tmp_path / "optim.bin", model=tmp_path / "model.bin")
    expected = dict(enumerate(name for name, _ in model.named_parameters()))
    assert view.optimizer is not None
    assert view.optimizer.param_names == expected
    assert [len(g["params"]) for g in view.optimizer.param_groups] == [4, 4]
    assert view.optimizer.param_groups[1]["lr"] == 1e-2


def test_training_state_bundle_names_optimizer_ids(tmp_path: Path) -> None:
    root = make_demo(tmp_path / "demo", steps=2)
    view = open_checkpoint(root / "resumed_from")
    assert view.family == "training-state"
    assert {n: p.kind for n, p in view.parts.items()} == {
        "lr_scheduler": "scheduler",
        "modeling": "model",
        "optimizer": "optimizer",
        "running_states.json": "running_state",
    }
    names = view.parts["optimizer"].optimizer.param_names  # type: ignore[union-attr]
    assert list(names.values()) == [n for n, _ in TinyLM().named_parameters()]
    assert view.values["lr_scheduler/last_epoch"] == 2
    assert view.values["running_states.json/step"] == 2
    rec = view.record("optimizer/state.0.exp_avg")
    assert rec.file.startswith("optimizer/pytorch_optim-")
    assert view.load("optimizer/state.0.exp_avg").shape == (256, 64)


def test_detection_is_by_content_not_extension(tmp_path: Path) -> None:
    sd = {"a": torch.ones(2)}
    save_file(sd, tmp_path / "weights.bin")
    torch.save(sd, tmp_path / "weights.safetensors")
    assert detect_format(tmp_path / "weights.bin").family == "safetensors"
    assert detect_format(tmp_path / "weights.safetensors").family == "torch-zip"


def test_scheduler_and_rng_files(tmp_path: Path) -> None:
    opt = torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    for _ in range(3):
        opt.step()
        sched.step()
    torch.save(sched.state_dict(), tmp_path / "lr_scheduler")
    rng = torch.get_rng_state()
    torch.save({"torch_rng": rng, "epoch": 1, "step": 3}, tmp_path / "meta.pt")
    sched_view = open_checkpoint(tmp_path / "lr_scheduler")
    assert (sched_view.kind, sched_view.values["last_epoch"]) == ("scheduler", 3)
    meta = open_checkpoint(tmp_path / "meta.pt")
    assert meta.kind == "rng" and meta.values["step"] == 3
    assert meta.record("torch_rng").dtype == "uint8"
    assert torch.equal(meta.load("torch_rng"), rng)


def test_cli_inspect_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.save({"layer.weight": torch.zeros(3, 5, dtype=torch.bfloat16)}, tmp_path / "m.pt")
    assert main(["inspect", str(tmp_path / "m.pt")]) == 0
    out = capsys.readouterr().out
    assert "layer.weight" in out and "bfloat16" in out and "3x5" in out and "torch-zip" in out
    assert main(["inspect", str(tmp_path / "m.pt"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "torch-zip" and report["kind"] == "model"
    assert report["tensors"] == [
        {
            "name": "layer.weight",
            "dtype": "bfloat16",
            "shape": [3, 5],
            "nbytes": 30,
            "file": "m.pt",
            "offset": report["tensors"][0]["offset"],
        }
    ]
    assert report["files"][0]["path"] == "m.pt" and report["files"][0]["bytes"] > 30
    assert main(["detect", str(tmp_path / "m.pt")]) == 0
    assert "torch-zip (model)" in capsys.readouterr().out


def test_unknown_name_is_a_clear_error(tmp_path: Path) -> None:
    torch.save({"a": torch.ones(1)}, tmp_path / "m.pt")
    with pytest.raises(CkptExplorerError, match="a tensor named 'b'"):
        open_checkpoint(tmp_path / "m.pt").load("b")
