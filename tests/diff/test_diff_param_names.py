"""Optimizer states pair by parameter name when ids shifted between the two checkpoints."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ckpt_explorer import diff_checkpoints, open_checkpoint


class Net(nn.Module):
    def __init__(self, with_aux: bool) -> None:
        super().__init__()
        self.first = nn.Linear(4, 6)
        if with_aux:
            self.aux = nn.Linear(3, 3)  # registered between the others, never used: no state
        self.second = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


def _save_training_state(folder: Path, with_aux: bool) -> Net:
    torch.manual_seed(0)
    model = Net(with_aux)
    if with_aux:  # same initial weights for the shared layers as the model without aux
        torch.manual_seed(0)
        plain = Net(False)
        model.first.load_state_dict(plain.first.state_dict())
        model.second.load_state_dict(plain.second.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.Generator().manual_seed(1)
    for _ in range(3):
        model(torch.randn(8, 4, generator=data)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    folder.mkdir()
    torch.save(model.state_dict(), folder / "model.bin")
    torch.save(opt.state_dict(), folder / "optimizer.bin")
    return model


def test_shifted_ids_pair_by_parameter_name(tmp_path: Path) -> None:
    _save_training_state(tmp_path / "a", with_aux=False)
    _save_training_state(tmp_path / "b", with_aux=True)
    b = open_checkpoint(tmp_path / "b")
    names_b = b.parts["optimizer.bin"].optimizer.param_names  # type: ignore[union-attr]
    assert names_b[4] == "second.weight" and names_b[2] == "aux.weight"

    result = diff_checkpoints(tmp_path / "a", tmp_path / "b")
    rows = {r["name"]: r for r in result.to_json()["tensors"]}
    for state in ("step", "exp_avg", "exp_avg_sq"):
        row = rows[f"optimizer.bin/state.2.{state}"]
        assert row["status"] == "identical"
        assert row["name_b"] == f"optimizer.bin/state.4.{state}"
        assert (row["match"], row["param"]) == ("param_name", "second.weight")
    assert rows["model.bin/aux.weight"]["status"] == "only_in_b"
    summary = result.summary()
    assert (summary["identical"], summary["only_in_a"], summary["only_in_b"]) == (16, 0, 2)
