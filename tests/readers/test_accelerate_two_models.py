"""accelerate ``save_state`` of two models (a GAN: generator and discriminator, each with its
own optimizer and scheduler, two learning rates as TTUR uses): optimizer_k.bin and
scheduler_k.bin belong to model_k, and are checked and named against it.

Written by the real accelerate ``prepare`` / ``save_state`` in a plain training loop.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from ckpt_explorer import open_checkpoint, validate_checkpoint


@pytest.fixture(scope="module")
def gan_state(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from accelerate import Accelerator
    from torch import nn

    out = tmp_path_factory.mktemp("gan") / "checkpoint-4"
    acc = Accelerator(cpu=True)
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 6))
    disc = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=4e-4, betas=(0.5, 0.999))
    sched_g = torch.optim.lr_scheduler.StepLR(opt_g, 3, gamma=0.5)
    sched_d = torch.optim.lr_scheduler.StepLR(opt_d, 3, gamma=0.5)
    gen, disc, opt_g, opt_d, sched_g, sched_d = acc.prepare(
        gen, disc, opt_g, opt_d, sched_g, sched_d
    )
    for _ in range(4):
        z, real = torch.randn(8, 4), torch.randn(8, 6)
        loss_d = disc(gen(z).detach()).mean() - disc(real).mean()
        acc.backward(loss_d)
        opt_d.step()
        sched_d.step()
        opt_d.zero_grad()
        loss_g = -disc(gen(z)).mean()
        acc.backward(loss_g)
        opt_g.step()
        sched_g.step()
        opt_g.zero_grad()
    acc.save_state(str(out))
    names = {
        "optimizer.bin": [n for n, _ in acc.unwrap_model(gen).named_parameters()],
        "optimizer_1.bin": [n for n, _ in acc.unwrap_model(disc).named_parameters()],
    }
    return {"path": out, "names": names}


def test_each_optimizer_is_named_by_its_own_model(gan_state: dict[str, Any]) -> None:
    view = open_checkpoint(gan_state["path"])
    for part, truth in gan_state["names"].items():
        info = view.parts[part].optimizer
        assert info is not None
        shown = [info.names[i] for i in sorted(info.names)]
        assert all(pn.known for pn in shown), (part, shown)
        assert [pn.name for pn in shown] == truth, part


def test_clean_gan_state_has_no_false_finding(gan_state: dict[str, Any]) -> None:
    """No state-shape error from checking the discriminator's optimizer against the
    generator, no last_lr warning from pairing scheduler_1 with the generator's optimizer."""
    report = validate_checkpoint(gan_state["path"])
    loud = [(f.rule, f.message) for f in report.findings if f.severity != "info"]
    assert not loud, loud


def test_swapped_optimizer_files_are_found(gan_state: dict[str, Any], tmp_path: Path) -> None:
    """Control: each optimizer file put in the other's place no longer fits its model."""
    state = shutil.copytree(gan_state["path"], tmp_path / "swapped")
    (state / "optimizer.bin").rename(state / "tmp.bin")
    (state / "optimizer_1.bin").rename(state / "optimizer.bin")
    (state / "tmp.bin").rename(state / "optimizer_1.bin")
    report = validate_checkpoint(state)
    shape_errors = {f.file for f in report.findings if f.rule == "optimizer.state_shape"}
    assert {"optimizer.bin", "optimizer_1.bin"} <= {
        str(f).split("/")[0] for f in shape_errors if f
    }, report.findings
