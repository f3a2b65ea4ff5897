"""Training states of writers whose conventions differ, for the writer profiles.

Usage: ``python tests/fixture_makers/realworld_profiles_maker.py OUT_DIR``

Each state is written by the real tool, trained the way its users run it (tiny models, a few
steps, CPU); faults are planted the way users make them. Every case records ``setup``,
``expect`` ("clean" or the planted fault), ``profile`` (the writer profile it should get).

* ``hf_<optim>``: transformers ``Trainer`` on a tiny Llama with ``optim=<optim>`` (adamw_torch,
  adafactor, and bitsandbytes' adamw_bnb_8bit, paged_adamw_8bit, lion_8bit where they run on
  CPU), ``gradient_accumulation_steps=2``, ``save_steps=2``: ``checkpoint-4`` (clean).
  Faults (adamw_torch): ``scheduler.pt`` lost before ``train(resume_from_checkpoint=
  checkpoint-2)`` (the Trainer then restores neither optimizer nor scheduler: both count 2
  steps at ``global_step`` 4, which the old rule explained as accumulation 2 × 2);
  ``optimizer.pt`` of an earlier save copied over a later one's.
* ``mmengine_*``: ``Runner.from_cfg`` (a registered toy model and dataset, AdamW with
  ``accumulative_counts=2``, LinearLR warm-up then CosineAnnealingLR by iteration,
  ``IterBasedTrainLoop`` of 8 iterations, ``CheckpointHook(interval=4)``): ``iter_4.pth`` and
  ``iter_8.pth`` (clean); resumed from ``iter_4.pth`` through ``Runner.resume``: all parts
  (clean), ``resume_param_scheduler=False``, ``resume_optimizer=False``; a work dir whose
  ``last_checkpoint`` still names ``iter_4.pth`` beside ``iter_8.pth`` (stale pointer).
* ``lightning_*``: ``lightning.Trainer`` + ``ModelCheckpoint(every_n_train_steps=2,
  save_last=True)``, ``accumulate_grad_batches=2``: the save at step 4 and ``last.ckpt``
  (clean); a ``last.ckpt`` left at step 2 while ``step=4`` was written beside it (stale copy).
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from _manifest import main_out_dir, run_maker
from _models import tiny_llama, token_dataset

SEED, VOCAB, SEQ = 0, 64, 16


def _case(out: Path, path: Path, setup: str, expect: str, profile: str, **extra: Any) -> Any:
    kind = "training_state"
    return {
        "path": path.relative_to(out).as_posix(),
        "family": extra.pop("family", "training-state"),
        "kind": kind,
        "setup": setup,
        "expect": expect,
        "profile": profile,
        **extra,
    }


# --- HF Trainer -------------------------------------------------------------------------
HF_OPTIMS = ("adamw_torch", "adafactor", "adamw_bnb_8bit", "paged_adamw_8bit", "lion_8bit")


def _hf_args(folder: Path, optim: str, max_steps: int) -> Any:
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(folder),
        max_steps=max_steps,
        save_steps=2,
        save_strategy="steps",
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        learning_rate=1e-3,
        warmup_steps=1,
        lr_scheduler_type="linear",
        optim=optim,
        logging_steps=1000,
        report_to="none",
        use_cpu=True,
        seed=SEED,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def _hf_train(folder: Path, optim: str, max_steps: int, resume: Path | None = None) -> None:
    from transformers import Trainer

    trainer = Trainer(
        model=tiny_llama(SEED, VOCAB),
        args=_hf_args(folder, optim, max_steps),
        train_dataset=token_dataset(64, SEED, VOCAB, SEQ),
    )
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)


def hf_cases(out: Path) -> dict[str, Any]:
    warnings.filterwarnings("ignore")
    cases: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for optim in HF_OPTIMS:
        folder = out / "hf" / optim
        try:
            _hf_train(folder, optim, 4)
        except Exception as e:  # bitsandbytes optimizers that need a GPU
            skipped[optim] = f"{type(e).__name__}: {str(e)[:200]}"
            shutil.rmtree(folder, ignore_errors=True)
            continue
        setup = f"HF Trainer optim={optim}, gradient_accumulation_steps=2"
        cases[f"hf_{optim}_step4"] = _case(
            out, folder / "checkpoint-4", setup, "clean", "hf-trainer"
        )
    setup = "HF Trainer optim=adamw_torch, gradient_accumulation_steps=2"
    base = out / "hf" / "adamw_torch"
    lost = out / "hf" / "resume_scheduler_lost"
    shutil.copytree(base / "checkpoint-2", lost / "checkpoint-2")
    (lost / "checkpoint-2" / "scheduler.pt").unlink()
    _hf_train(lost, "adamw_torch", 4, resume=lost / "checkpoint-2")
    cases["hf_resume_scheduler_lost"] = _case(
        out,
        lost / "checkpoint-4",
        setup,
        "scheduler_not_restored",
        "hf-trainer",
        also=["optimizer_moments_reset"],
    )
    copied = out / "hf" / "optimizer_copied"
    shutil.copytree(base / "checkpoint-4", copied / "checkpoint-4")
    shutil.copy2(base / "checkpoint-2" / "optimizer.pt", copied / "checkpoint-4" / "optimizer.pt")
    cases["hf_optimizer_from_other_save"] = _case(
        out, copied / "checkpoint-4", setup, "optimizer_moments_reset", "hf-trainer"
    )
    (out / "hf" / "skipped.json").write_text(repr(skipped), encoding="utf-8")
    for case in cases.values():
        case["skipped_optims"] = skipped
    return cases


# --- mmengine ---------------------------------------------------------------------------
def _mm_register() -> None:
    from mmengine.model import BaseModel
    from mmengine.registry import DATASETS, MODELS
    from torch import nn
    from torch.utils.data import Dataset

    if "ProfToyModel" in MODELS.module_dict:
        return

    @MODELS.register_module()
    class ProfToyModel(BaseModel):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1)
            )

        def forward(self, x: Any, y: Any, mode: str = "tensor") -> Any:
            out = self.net(x)
            if mode == "loss":
                return {"loss": ((out - y) ** 2).mean()}
            return out

    @DATASETS.register_module()
    class ProfToyData(Dataset):  # type: ignore[misc]
        def __init__(self) -> None:
            g = torch.Generator().manual_seed(0)
            self.x, self.y = torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g)

        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int) -> Any:
            return {"x": self.x[i], "y": self.y[i]}


def _mm_cfg(work_dir: Path, max_iters: int) -> Any:
    from mmengine.config import Config

    return Config(
        {
            "model": {"type": "ProfToyModel"},
            "work_dir": str(work_dir),
            "train_dataloader": {
                "dataset": {"type": "ProfToyData"},
                "sampler": {"type": "DefaultSampler", "shuffle": True},
                "batch_size": 8,
                "collate_fn": {"type": "default_collate"},
            },
            "optim_wrapper": {
                "optimizer": {"type": "AdamW", "lr": 1e-3},
                "accumulative_counts": 2,
            },
            "param_scheduler": [
                {"type": "LinearLR", "start_factor": 0.1, "by_epoch": False, "begin": 0, "end": 4},
                {"type": "CosineAnnealingLR", "by_epoch": False, "begin": 4, "T_max": 20},
            ],
            "train_cfg": {"by_epoch": False, "max_iters": max_iters, "val_interval": 1000},
            "default_hooks": {
                "checkpoint": {"type": "CheckpointHook", "interval": 4, "by_epoch": False},
                "logger": {"type": "LoggerHook", "interval": 1000},
            },
            "randomness": {"seed": SEED},
            "log_level": "WARNING",
        }
    )


def _mm_run(work_dir: Path, max_iters: int, resume: Path | None = None, **flags: bool) -> None:
    from mmengine.runner import Runner

    # mmengine 0.10's load_checkpoint calls torch.load with torch's default, weights_only=True
    # since torch 2.6, which refuses its own message_hub: its users set torch's switch back
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"

    class ResumingRunner(Runner):  # type: ignore[misc]
        def load_or_resume(self) -> None:
            if resume is not None:
                self.resume(str(resume), **flags)

    ResumingRunner.from_cfg(_mm_cfg(work_dir, max_iters)).train()


def mmengine_cases(out: Path) -> dict[str, Any]:
    warnings.filterwarnings("ignore")
    _mm_register()
    setup = "mmengine Runner, IterBasedTrainLoop, accumulative_counts=2"
    base = out / "mmengine" / "run"
    _mm_run(base, 8)
    cases = {
        "mmengine_iter4": _case(out, base / "iter_4.pth", setup, "clean", "mmengine"),
        "mmengine_iter8": _case(out, base / "iter_8.pth", setup, "clean", "mmengine"),
    }
    frozen = out / "mmengine" / "from" / "iter_4.pth"
    frozen.parent.mkdir(parents=True)
    shutil.copy2(base / "iter_4.pth", frozen)
    resumes = {
        "mmengine_resume_clean": ({}, "clean"),
        "mmengine_resume_no_scheduler": (
            {"resume_param_scheduler": False},
            "scheduler_not_restored",
        ),
        "mmengine_resume_no_optimizer": ({"resume_optimizer": False}, "optimizer_moments_reset"),
    }
    for case_id, (flags, expect) in resumes.items():
        folder = out / "mmengine" / case_id
        _mm_run(folder, 8, frozen, **flags)
        cases[case_id] = _case(
            out, folder / "iter_8.pth", setup, expect, "mmengine", resume_of="mmengine_iter4"
        )
    stale = out / "mmengine" / "stale_pointer"
    shutil.copytree(base, stale)
    (stale / "last_checkpoint").write_text(str(stale / "iter_4.pth"), encoding="utf-8")
    cases["mmengine_stale_pointer"] = _case(
        out, stale / "iter_8.pth", setup, "stale_pointer", "mmengine"
    )
    return cases


# --- Lightning --------------------------------------------------------------------------
def _lightning_fit(folder: Path, max_steps: int, ckpt: Path | None = None) -> None:
    import lightning as L
    from lightning.pytorch import callbacks
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    class Regressor(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

        def training_step(self, batch: Any, _: int) -> torch.Tensor:
            x, y = batch
            return ((self.net(x) - y) ** 2).mean()

        def configure_optimizers(self) -> Any:
            opt = torch.optim.AdamW(self.parameters(), lr=1e-3)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (1 + s))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g))
    torch.manual_seed(0)
    trainer = L.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        accumulate_grad_batches=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            callbacks.ModelCheckpoint(
                dirpath=folder, every_n_train_steps=2, save_top_k=-1, save_last=True
            )
        ],
    )
    trainer.fit(Regressor(), DataLoader(data, batch_size=8, shuffle=True), ckpt_path=ckpt)


def lightning_cases(out: Path) -> dict[str, Any]:
    warnings.filterwarnings("ignore")
    setup = "Lightning Trainer + ModelCheckpoint(save_last=True), accumulate_grad_batches=2"
    run = out / "lightning" / "run"
    _lightning_fit(run, 2)
    early_last = out / "lightning" / "last_at_step2.ckpt"
    shutil.copy2(run / "last.ckpt", early_last)
    _lightning_fit(run, 4, ckpt=run / "last.ckpt")
    step4 = sorted(run.glob("epoch=*-step=4.ckpt"))
    if len(step4) != 1:
        raise AssertionError(f"expected one step-4 save in {run}: {sorted(run.iterdir())}")
    stale = out / "lightning" / "stale"
    shutil.copytree(run, stale)
    shutil.copy2(early_last, stale / "last.ckpt")  # the run stopped before the copy was renewed
    family = {"family": "torch-zip"}
    return {
        "lightning_accum_step4": _case(out, step4[0], setup, "clean", "lightning", **family),
        "lightning_accum_last": _case(
            out, run / "last.ckpt", setup, "clean", "lightning", **family
        ),
        "lightning_stale_last": _case(
            out, stale / "last.ckpt", setup, "stale_copy", "lightning", **family
        ),
    }


def main(argv: list[str]) -> int:
    import lightning
    import mmengine
    import transformers

    out = main_out_dir(argv)
    version = f"transformers {transformers.__version__}, lightning {lightning.__version__}, "
    version += f"mmengine {mmengine.__version__}"
    return run_maker(
        out,
        "realworld_profiles",
        version,
        {"hf": hf_cases, "mmengine": mmengine_cases, "lightning": lightning_cases},
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv))
