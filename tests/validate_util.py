"""Helpers for the validation and doctor tests: copy real-tool outputs, train tiny real runs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ckpt_explorer.validate import ValidationReport


def copy_case(real_checkpoints: Any, tool: str, case: str, dest: Path) -> Path:
    """Copy one case of a real-tool fixture to ``dest`` and return the copy's path."""
    root, manifest = real_checkpoints(tool)
    src = root / manifest["cases"][case]["path"]
    out = dest / src.name
    if src.is_dir():
        shutil.copytree(src, out)
    else:
        shutil.copy2(src, out)
    return out


def fired(report: ValidationReport, rule: str, **where: Any) -> list[Any]:
    """Findings of ``rule`` whose tensor/file/param_id equal ``where``."""
    return [
        f
        for f in report.findings
        if f.rule == rule and all(getattr(f, k) == v for k, v in where.items())
    ]


def train_tiny(steps: int, seed: int = 0, permute: bool = False, scheduler: bool = True) -> Any:
    """A real torch run of ckpt_explorer.demo's TinyLM with AdamW (+ LambdaLR)."""
    import torch

    from ckpt_explorer.demo import TinyLM

    torch.manual_seed(seed)
    model = TinyLM()
    params = list(model.parameters())
    if permute:
        params = params[::-1]
    opt = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    run_steps(model, opt, sched if scheduler else None, steps)
    return model, opt, sched


def run_steps(model: Any, opt: Any, sched: Any, steps: int) -> None:
    import torch
    from torch import nn

    for _ in range(steps):
        ids = torch.randint(0, 256, (4, 16))
        loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        opt.zero_grad()
