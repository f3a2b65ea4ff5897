"""What each entry of a checkpoint is, decided once by the readers and asked of the view:
the model's tensors, each optimizer state's slot, the run position, the RNG state — and the
parameter count that follows (the model only, never optimizer moments)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ckpt_explorer import diff_checkpoints, open_checkpoint
from ckpt_explorer.convert.source_reading import read_source
from ckpt_explorer.inspect_report import inspect_report
from ckpt_explorer.types import Slot
from ckpt_explorer.ui.tables import folded_names, model_parameter_count
from ckpt_explorer.validate.parts import collect


def _trained(model: nn.Module, opt: torch.optim.Optimizer, steps: int = 3) -> None:
    for _ in range(steps):
        model(torch.randn(5, 4)).sum().backward()
        opt.step()
        opt.zero_grad()


def _save_dcp(state: dict[str, Any], folder: Path) -> Path:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(folder))
    return folder


def _one_view_state(folder: Path, steps: int = 3) -> tuple[Path, nn.Module, dict[str, Any]]:
    """A one-view DCP training state as a plain loop saves it: model, an id-keyed AdamW
    state, the CPU RNG state and a train_state step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters())
    _trained(model, opt, steps)
    osd = opt.state_dict()
    state = {
        "model": model.state_dict(),
        "optim": osd,
        "rng": torch.get_rng_state(),
        "train_state": {"step": torch.tensor(steps)},
    }
    return _save_dcp(state, folder), model, osd


def test_one_view_dcp_state_counts_its_model_only(tmp_path: Path) -> None:
    folder, model, osd = _one_view_state(tmp_path / "state")
    view = open_checkpoint(folder)
    assert view.kind == "training_state" and not view.parts
    n_params = sum(p.numel() for p in model.parameters())
    moments = sum(t.numel() for s in osd["state"].values() for t in s.values())
    assert view.element_count >= n_params + moments + torch.get_rng_state().numel()
    assert inspect_report(view)["parameter_count"] == n_params
    assert model_parameter_count(view) == (n_params, ("model.*",))  # the dashboard's card
    found = view.state_map
    assert [r.name for r in found.model] == [f"model.{k}" for k in model.state_dict()]
    assert found.has_rng
    assert [(rs.prefix, rs.entries) for rs in found.run] == [
        ("train_state.", {"step": "train_state.step"})
    ]
    content = read_source(view)  # convert --model-only writes the same model
    assert [t.name for t in content.tensors] == list(model.state_dict())


def test_one_view_dcp_state_slots_every_optimizer_state(tmp_path: Path) -> None:
    folder, _, osd = _one_view_state(tmp_path / "state")
    view = open_checkpoint(folder)
    slots = {n: s for n, s in view.state_map.slots.items() if n in view}
    want = {
        f"optim.state.{pid}.{name}": Slot("optim.", pid, name)
        for pid, states in osd["state"].items()
        for name, value in states.items()
        if isinstance(value, torch.Tensor)
    }
    assert slots == want
    (opt,) = view.state_map.optimizers
    assert opt.prefix == "optim." and not opt.flat
    assert set(opt.states) == set(osd["state"])
    assert [list(g["params"]) for g in opt.groups] == [g["params"] for g in osd["param_groups"]]
    assert view.slot("model.0.weight") is None


def test_two_optimizers_of_one_view_keep_their_own_ids(tmp_path: Path) -> None:
    """A GAN's generator and discriminator optimizers saved side by side in one DCP state:
    both number their parameters from 0; the slot says whose state an entry is."""
    torch.manual_seed(0)
    gen, disc = nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 1))
    opt_g = torch.optim.Adam(gen.parameters())
    opt_d = torch.optim.SGD(disc.parameters(), lr=0.1, momentum=0.9)
    _trained(gen, opt_g)
    _trained(nn.Sequential(gen, disc), opt_d)
    state = {
        "gen": gen.state_dict(),
        "disc": disc.state_dict(),
        "opt_g": opt_g.state_dict(),
        "opt_d": opt_d.state_dict(),
    }
    view = open_checkpoint(_save_dcp(state, tmp_path / "gan"))
    found = view.state_map
    assert [o.prefix for o in found.optimizers] == ["opt_d.", "opt_g."]
    assert view.slot("opt_g.state.0.exp_avg") == Slot("opt_g.", 0, "exp_avg")
    assert view.slot("opt_d.state.0.momentum_buffer") == Slot("opt_d.", 0, "momentum_buffer")
    assert view.slot("opt_g.state.0.momentum_buffer") is None
    assert {r.name for r in found.model} == {f"gen.{k}" for k in gen.state_dict()} | {
        f"disc.{k}" for k in disc.state_dict()
    }
    n_params = sum(p.numel() for m in (gen, disc) for p in m.parameters())
    assert inspect_report(view)["parameter_count"] == n_params
    comps = collect(view)
    assert sorted(o.prefix for o in comps.optimizers) == ["opt_d.", "opt_g."]


def test_diff_rows_of_a_one_view_state_name_their_optimizer_state(tmp_path: Path) -> None:
    a, _, _ = _one_view_state(tmp_path / "a", steps=3)
    b, _, _ = _one_view_state(tmp_path / "b", steps=4)
    result = diff_checkpoints(a, b)
    rows = {r.name: r for r in result.tensors}
    assert rows["optim.state.0.exp_avg"].state == "exp_avg"
    assert rows["optim.state.0.exp_avg"].module == "optim.state.0"
    assert rows["model.0.weight"].state is None
    assert rows["model.0.weight"].status == "changed"


def test_one_file_state_names_resolve_through_their_part(tmp_path: Path) -> None:
    """A torch.save of ``{"model", "optimizer", "epoch"}``: the file's own names
    (``optimizer.state.0.exp_avg``) are the optimizer part's slots, named by the model's
    parameter order."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters())
    _trained(model, opt)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 1}, path)
    view = open_checkpoint(path)
    assert view.slot("optimizer.state.1.exp_avg") == Slot("", 1, "exp_avg")
    assert view.slot_param("optimizer.state.1.exp_avg") == "0.bias"
    assert view.slot("model.0.weight") is None
    folded = folded_names(view)  # the dashboard folds the states under their parameter
    assert folded["optimizer.state.2.exp_avg_sq"] == ("1.weight", "exp_avg_sq")
    assert inspect_report(view)["parameter_count"] == sum(p.numel() for p in model.parameters())


def test_traits_replace_family_and_detail_strings(tmp_path: Path) -> None:
    """What consumers act on is typed on the view: a DCP folder's items, a torch file's
    parameter order, an optimizer file without a model."""
    folder, _, _ = _one_view_state(tmp_path / "state")
    dcp = open_checkpoint(folder)
    assert dcp.traits.dcp_items and dcp.traits.loaded_by == "dcp" and dcp.traits.keeps_order
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _trained(nn.Sequential(nn.Linear(4, 3), model), opt)
    torch.save(model.state_dict(), tmp_path / "model.pt")
    torch.save(opt.state_dict(), tmp_path / "optim.pt")
    weights, optim = open_checkpoint(tmp_path / "model.pt"), open_checkpoint(tmp_path / "optim.pt")
    assert weights.traits.keeps_order and weights.traits.loaded_by == "torch.load"
    assert not weights.traits.dcp_items and not weights.traits.ema_copy
    assert optim.traits.step_is_position and not optim.traits.flat_optimizer
    assert inspect_report(optim)["parameter_count"] is None  # moments are not parameters
    assert model_parameter_count(optim) is None
