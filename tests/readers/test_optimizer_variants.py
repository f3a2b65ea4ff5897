"""Optimizers that are not Adam-shaped, saved clean by real training steps: no false findings.

- Groups that hold tensors: LAMB implementations keep ``step`` as a tensor in each param group
  (timm's ``Lamb``, Apex ``FusedLAMB``), so the groups are flattened beside the states.
- Adafactor (``transformers.optimization.Adafactor``, HF Trainer ``optim="adafactor"``): its
  groups have ``beta1`` / ``decay_rate``, never ``betas``, although unfactored params carry an
  ``exp_avg_sq``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ckpt_explorer import open_checkpoint, resume_doctor, validate_checkpoint


class GroupStepLamb(torch.optim.Optimizer):
    """LAMB written the way timm's ``timm.optim.Lamb`` is (the writer this stands for; timm
    cannot run in CI here, its torchvision wheel needs CUDA): a ``step`` tensor kept in each
    param group, per-parameter ``exp_avg`` / ``exp_avg_sq`` and a layer-wise trust ratio."""

    def __init__(self, params: Any, lr: float = 1e-3, weight_decay: float = 0.01) -> None:
        super().__init__(
            params, dict(lr=lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=weight_decay)
        )

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        for group in self.param_groups:
            if "step" not in group:
                group["step"] = torch.tensor(0.0)
            group["step"].add_(1)
            step = float(group["step"])
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                update = (m / (1 - beta1**step)) / ((v / (1 - beta2**step)).sqrt() + group["eps"])
                update.add_(p, alpha=group["weight_decay"])
                w, u = p.norm(), update.norm()
                trust = torch.where((w > 0) & (u > 0), w / u, torch.ones_like(w))
                p.add_(update * trust, alpha=-group["lr"])


def _model(reordered: bool = False) -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 12), nn.ReLU(), nn.Linear(12, 4)]
    return nn.Sequential(*(layers[::-1] if reordered else layers))


def _groups(model: nn.Module, reverse: bool = False) -> list[dict[str, Any]]:
    """No-decay (1-D) then decay groups, as timm's ``param_groups_weight_decay`` builds them."""
    params = list(model.parameters())[:: -1 if reverse else 1]
    return [
        {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0},
        {"params": [p for p in params if p.ndim > 1], "weight_decay": 0.05},
    ]


def _train(model: nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(6, 8, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _save(path: Path, model: nn.Module, opt: torch.optim.Optimizer, epoch: int = 0) -> Path:
    """A training loop's one-file save (the epoch is its run position)."""
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch}
    torch.save(state, path)
    return path


def _loud(report: Any) -> list[tuple[str, str, str]]:
    return [(f.severity, f.rule, f.message) for f in report.findings if f.severity != "info"]


def _optimizer_info(path: Path) -> Any:
    view = open_checkpoint(path)
    return next(p.optimizer for p in view.parts.values() if p.optimizer is not None)


def _expected_names(model: nn.Module, opt: torch.optim.Optimizer) -> dict[int, str]:
    """Parameter name of each id, as torch numbers the live optimizer's params."""
    name_of = {id(p): n for n, p in model.named_parameters()}
    params = [p for g in opt.param_groups for p in g["params"]]
    return {i: name_of[id(p)] for i, p in enumerate(params)}


def test_lamb_group_step_clean(tmp_path: Path) -> None:
    model = _model()
    opt = GroupStepLamb(_groups(model))
    _train(model, opt, 3)
    a = _save(tmp_path / "a.pt", model, opt)
    _train(model, opt, 3)
    b = _save(tmp_path / "b.pt", model, opt, 1)

    report = validate_checkpoint(b)
    assert not _loud(report), _loud(report)
    info = _optimizer_info(b)
    assert len(info.param_groups) == 2
    assert [g["step"] for g in info.param_groups] == [6.0, 6.0]
    assert [g["weight_decay"] for g in info.param_groups] == [0.0, 0.05]
    assert [g["params"] for g in info.param_groups] == [
        list(range(len(opt.param_groups[0]["params"]))),
        list(range(len(opt.param_groups[0]["params"]), len(_expected_names(model, opt)))),
    ]
    assert not info.inconsistencies
    assert info.param_names == _expected_names(model, opt)

    doctor = resume_doctor(a, b)
    assert doctor.facts["optimizer step"] == (3, 6)
    assert all(c.score < 0.5 for c in doctor.causes), doctor.format_text()


def test_lamb_param_order_still_found(tmp_path: Path) -> None:
    """States of an optimizer built over the parameters in another order than the model's."""
    model = _model()
    opt = GroupStepLamb(_groups(model, reverse=True))
    _train(model, opt, 2)
    path = _save(tmp_path / "s.pt", model, opt)
    report = validate_checkpoint(path)
    errors = [f for f in report.findings if f.rule == "optimizer.state_shape"]
    assert errors and all(f.severity == "error" for f in errors)
    assert any("different param order" in f.hint for f in errors)
    ok = GroupStepLamb(_groups(model))
    _train(model, ok, 2)
    clean = _save(tmp_path / "clean.pt", model, ok)
    doctor = resume_doctor(clean, path)
    assert doctor.top is not None and doctor.top.cause == "param_order_changed"
    assert doctor.top.score >= 0.5


def _adafactor(model: nn.Module, beta1: float | None) -> torch.optim.Optimizer:
    from transformers.optimization import Adafactor

    return Adafactor(
        _groups(model), lr=1e-3, scale_parameter=False, relative_step=False, beta1=beta1
    )


@pytest.mark.parametrize("beta1", [None, 0.9])
def test_adafactor_clean(tmp_path: Path, beta1: float | None) -> None:
    model = _model()
    opt = _adafactor(model, beta1)
    _train(model, opt, 3)
    a = _save(tmp_path / "a.pt", model, opt)
    _train(model, opt, 3)
    b = _save(tmp_path / "b.pt", model, opt, 1)
    states = {k for s in opt.state_dict()["state"].values() for k in s}
    assert {"exp_avg_sq", "exp_avg_sq_row", "exp_avg_sq_col"} <= states  # both kinds of param
    assert ("exp_avg" in states) == (beta1 is not None)

    report = validate_checkpoint(b)
    assert not _loud(report), _loud(report)
    info = _optimizer_info(b)
    assert info.param_names == _expected_names(model, opt)
    doctor = resume_doctor(a, b)
    assert doctor.facts["optimizer step"] == (3, 6)
    assert all(c.score < 0.5 for c in doctor.causes), doctor.format_text()


def test_adam_missing_betas_still_warned(tmp_path: Path) -> None:
    """An AdamW state whose groups lost ``betas`` is still flagged."""
    model = _model()
    opt = torch.optim.AdamW(_groups(model), lr=1e-3)
    _train(model, opt, 2)
    sd = opt.state_dict()
    for g in sd["param_groups"]:
        del g["betas"]
    torch.save({"model": model.state_dict(), "optimizer": sd}, tmp_path / "s.pt")
    report = validate_checkpoint(tmp_path / "s.pt")
    lacks = [f.message for f in report.findings if f.rule == "optimizer.hyperparameters"]
    assert lacks == ["group 0 lacks betas", "group 1 lacks betas"]


def test_trainer_adafactor_clean(tmp_path: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32))
    g = torch.Generator().manual_seed(0)
    data = [
        {"input_ids": x, "labels": x.clone()} for x in torch.randint(0, 32, (16, 8), generator=g)
    ]
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        optim="adafactor",
        max_steps=4,
        save_steps=2,
        per_device_train_batch_size=4,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    Trainer(model=model, args=args, train_dataset=data).train()
    first, last = tmp_path / "run" / "checkpoint-2", tmp_path / "run" / "checkpoint-4"
    report = validate_checkpoint(last)
    assert not _loud(report), _loud(report)
    doctor = resume_doctor(first, last)
    assert doctor.facts["optimizer step"] == (2, 4)
    assert all(c.score < 0.5 for c in doctor.causes), doctor.format_text()
