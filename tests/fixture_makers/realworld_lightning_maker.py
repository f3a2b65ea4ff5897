"""Real-world training states, PyTorch Lightning side.

Usage: ``python tests/fixture_makers/realworld_lightning_maker.py OUT_DIR``

A ``LightningModule`` (Linear / LayerNorm / Dropout / Linear) trained by ``lightning.Trainer`` on
CPU in ``bf16-mixed``, the way Lightning users write it: ``configure_optimizers`` returns AdamW
with decay / no-decay groups (by ``ndim``) and OneCycleLR stepped every batch (it cycles
``betas[0]`` each step); callbacks ``ModelCheckpoint(every_n_train_steps=4, save_top_k=-1,
save_last=True)``, ``EarlyStopping`` and ``LearningRateMonitor``. Each ``.ckpt`` holds
``state_dict``, ``optimizer_states``, ``lr_schedulers``, ``callbacks`` (whose ``kth_value`` /
``best_score`` start at +Inf), ``loops``, ``epoch``, ``global_step`` and the hyperparameters.

Cases (the corpus contract ``setup``, ``expect``, ``resume_of``, ``id_names`` is in
tests/realworld_check.py):

* ``fit``: steps 4 and 8 of one fit (``run_clean/``, later resumed from ``last.ckpt`` to step 16
  into the same folder: a clean run folder for the timeline).
* ``resume``: ``trainer.fit(model, ckpt_path=<step 4>)``, saved at step 8: clean.
* ``hydra``: a fit whose hyperparameters are an OmegaConf config
  (``save_hyperparameters(cfg)``, as Hydra users write it): every config node points back at its
  parent in the pickle.
* ``restart``: the common mistake ``Model.load_from_checkpoint(<step 4>)`` then ``fit(model)``
  without ``ckpt_path``: weights kept, optimizer, scheduler and step counter start afresh
  (saved at step 4 again). Its file alone is a plausible fresh run (``shape_visible`` false);
  the pair shows the reset. ``run_restart/`` holds the fit's checkpoints and, written later,
  the restart's (Lightning names them ``...-v1.ckpt``): a mixed run folder for the timeline.

``id_names`` come from the live module and optimizer, numbered as ``Optimizer.state_dict``
numbers params; each case also records the model keys and the ``callbacks`` tensors.
"""

from __future__ import annotations

import shutil
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from _manifest import main_out_dir, run_maker

STEPS_PER_SAVE = 4
SETUP = "PyTorch Lightning Trainer (ModelCheckpoint .ckpt)"


def _module_class(with_cfg: bool = False) -> type:
    import lightning as L
    from torch import nn

    class Regressor(L.LightningModule):
        def __init__(self, lr: Any = 1e-3) -> None:
            super().__init__()
            if with_cfg:
                self.save_hyperparameters(lr)  # an OmegaConf config
            else:
                self.save_hyperparameters()
            self.net = nn.Sequential(
                nn.Linear(8, 16), nn.LayerNorm(16), nn.Dropout(0.1), nn.ReLU(), nn.Linear(16, 1)
            )

        def training_step(self, batch: Any, _: int) -> torch.Tensor:
            x, y = batch
            loss = ((self.net(x) - y) ** 2).mean()
            self.log("loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            decay = [p for p in self.parameters() if p.ndim > 1]
            no_decay = [p for p in self.parameters() if p.ndim <= 1]
            opt = torch.optim.AdamW(
                [
                    {"params": decay, "weight_decay": 0.1},
                    {"params": no_decay, "weight_decay": 0.0},
                ],
                lr=self.hparams.optim.lr if with_cfg else self.hparams.lr,
            )
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=64)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    return Regressor


def _trainer(folder: Path, max_steps: int) -> Any:
    import lightning as L
    from lightning.pytorch import callbacks
    from lightning.pytorch.loggers import CSVLogger

    return L.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        precision="bf16-mixed",
        logger=CSVLogger(folder.parent / "logs", name=folder.name),
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            callbacks.ModelCheckpoint(
                dirpath=folder,
                every_n_train_steps=STEPS_PER_SAVE,
                save_top_k=-1,
                save_last=True,
            ),
            callbacks.EarlyStopping(monitor="loss", patience=1000, check_on_train_epoch_end=True),
            callbacks.LearningRateMonitor(),
        ],
    )


def _data() -> Any:
    from torch.utils.data import DataLoader, TensorDataset

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(48, 8, generator=g), torch.randn(48, 1, generator=g))
    return DataLoader(data, batch_size=8, shuffle=True)


def id_names(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, str]:
    """``{state id: parameter name}`` numbered as ``Optimizer.state_dict`` numbers params."""
    names = {id(p): n for n, p in module.named_parameters()}
    ids = [id(p) for g in optimizer.param_groups for p in g["params"]]
    return {str(i): names[pid] for i, pid in enumerate(ids)}


def _saved(folder: Path, step: int, version: str = "") -> Path:
    found = sorted(folder.glob(f"epoch=*-step={step}{version}.ckpt"))
    if len(found) != 1:
        raise AssertionError(f"expected one step {step}{version} checkpoint in {folder}: {found}")
    return found[0]


def _case(
    out: Path,
    path: Path,
    setup: str,
    truth: Mapping[str, str],
    expect: str = "clean",
    **extra: Any,
) -> dict[str, Any]:
    """One manifest case, checked against what Lightning wrote."""
    ckpt = torch.load(path, map_location="cpu", weights_only=False)  # our own file
    osd = ckpt["optimizer_states"][0]
    ids = {str(i) for g in osd["param_groups"] for i in g["params"]}
    if ids != set(truth):
        raise AssertionError(f"{path.name}: optimizer ids {sorted(ids)} != {sorted(truth)}")
    callback_tensors = {
        f"{cb}.{k}": float(v)
        for cb, state in ckpt["callbacks"].items()
        for k, v in state.items()
        if isinstance(v, torch.Tensor)
    }
    return {
        "path": path.relative_to(out).as_posix(),
        "family": "torch-zip",
        "kind": "training_state",
        "setup": setup,
        "expect": expect,
        "id_names": {"": dict(truth)},
        "global_step": ckpt["global_step"],
        "model_keys": sorted(ckpt["state_dict"]),
        "callback_tensors": {k: repr(v) for k, v in callback_tensors.items()},
        "lightning": ckpt["pytorch-lightning_version"],
        **extra,
    }


def lightning_cases(out: Path) -> dict[str, Any]:
    warnings.filterwarnings("ignore")
    regressor = _module_class()
    torch.manual_seed(0)
    clean = out / "run_clean"
    model = regressor()
    trainer = _trainer(clean, 8)
    trainer.fit(model, _data())
    truth = id_names(model, trainer.optimizers[0])
    step4, step8 = _saved(clean, 4), _saved(clean, 8)
    frozen = out / "states"
    frozen.mkdir()
    for src in (step4, step8):
        shutil.copy2(src, frozen / f"fit_{src.name}")
    cases = {
        "lightning_step4": _case(out, frozen / f"fit_{step4.name}", SETUP, truth),
        "lightning_step8": _case(out, frozen / f"fit_{step8.name}", SETUP, truth),
    }

    # the clean run goes on from its last.ckpt, into the same folder
    model = regressor()
    _trainer(clean, 16).fit(model, _data(), ckpt_path=clean / "last.ckpt")

    resumed_dir = out / "run_resume"
    model = regressor()
    trainer = _trainer(resumed_dir, 8)
    trainer.fit(model, _data(), ckpt_path=frozen / f"fit_{step4.name}")
    cases["lightning_resume_clean"] = _case(
        out,
        _saved(resumed_dir, 8),
        SETUP,
        id_names(model, trainer.optimizers[0]),
        resume_of="lightning_step4",
    )

    # the fit's checkpoints, then (later) a restart from step 4's weights into the same folder
    mixed = out / "run_restart"
    mixed.mkdir()
    for src in (step4, step8):
        shutil.copy2(src, mixed / src.name)
    time.sleep(3.0)  # the restart comes later than the fit, as a real one does
    model = regressor.load_from_checkpoint(frozen / f"fit_{step4.name}")
    trainer = _trainer(mixed, 8)
    trainer.fit(model, _data())
    cases["lightning_restart_weights_only"] = _case(
        out,
        _saved(mixed, 4, "-v1"),
        SETUP,
        id_names(model, trainer.optimizers[0]),
        expect="optimizer_moments_reset",
        also=["scheduler_not_restored"],
        shape_visible=False,
        resume_of="lightning_step4",
    )
    # Hydra users: the hyperparameters are an OmegaConf config (nodes point back at parents)
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"optim": {"lr": 1e-3}, "data": {"batch_size": 8}})
    model = _module_class(with_cfg=True)(cfg)
    trainer = _trainer(out / "run_hydra", 4)
    trainer.fit(model, _data())
    cases["lightning_hydra_cfg_step4"] = _case(
        out, _saved(out / "run_hydra", 4), SETUP, id_names(model, trainer.optimizers[0])
    )
    for case in cases.values():
        case["run_folders"] = {"clean": "run_clean", "restart": "run_restart"}
    return cases


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {"lightning": lightning_cases}


def main(argv: list[str]) -> int:
    import lightning

    version = f"torch {torch.__version__}, lightning {lightning.__version__}"
    return run_maker(main_out_dir(argv), "realworld_lightning", version, CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
