"""Real-world training states written the way timm's ``train.py`` writes them.

Usage: ``python tests/fixture_makers/realworld_timm_maker.py OUT_DIR``

timm's training script is not in the wheel; this maker runs its loop with timm's own pieces:
``timm.create_model`` (a tiny ViT and a tiny ResNet, no downloads), ``create_optimizer_v2``
(AdamW, no weight decay on norms and biases), ``create_scheduler_v2`` (cosine, warm-up, stepped
per update with ``step_update`` and per epoch with ``step``), ``ModelEmaV3``, ``NativeScaler``
(fp16 autocast and a GradScaler on CPU), ``CheckpointSaver`` (``last.pth.tar`` then a copy
``checkpoint-<epoch>.pth.tar``; ``state_dict``, ``optimizer``, ``epoch``, ``arch``, ``args``
(the argparse Namespace), ``version``, ``amp_scaler``, ``state_dict_ema``, ``metric`` and the
saver's history) and ``resume_checkpoint`` (``start_epoch = resume_epoch``; the scheduler is
not saved: ``lr_scheduler.step(start_epoch)`` rebuilds it from the epoch).

timm is imported from its side folder (``.venv/side/timm``, with torchvision 0.28: no CPU build
of it matches the CPU torch, so its C++ ops cannot load; their two schemas torchvision
registers fakes for are defined first, nothing here calls them).

Cases per model (``vit``, ``resnet``; the corpus contract is in tests/realworld_check.py):

* ``timm_<m>_epoch1`` / ``timm_<m>_epoch3``: one run's ``checkpoint-1`` / ``checkpoint-3``.
* ``timm_<m>_resume_clean``: ``--resume checkpoint-1.pth.tar`` into a new output folder, its
  ``checkpoint-3``.
* ``timm_<m>_no_resume_opt``: ``--resume ... --no-resume-opt``: the model comes back, the
  optimizer and the loss scaler start afresh (the recorded ``args`` say so).
* ``timm_vit_stale_last``: a copy of the run folder whose ``last.pth.tar`` is epoch 1's (a
  sync that stopped before the newer copy): validate of that ``last`` file.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from _manifest import main_out_dir, run_maker, side_folder
from _models import id_names

SETUP = "timm train.py loop (CheckpointSaver, ModelEmaV3, NativeScaler)"
EPOCHS, UPDATES = 4, 3
_LIB: Any = None


def _import_timm() -> Any:
    global _LIB
    if _LIB is None:
        _LIB = torch.library.Library("torchvision", "DEF")
        _LIB.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _LIB.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        sys.path.insert(0, side_folder("timm", "TIMM_SIDE_DIR", "timm"))
    import timm

    return timm


MODELS = {
    "vit": (
        "vit_tiny_patch16_224",
        {"img_size": 16, "patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2},
    ),
    "resnet": ("resnet18", {"layers": [1, 1, 1, 1], "channels": (8, 8, 16, 16), "stem_width": 8}),
}


def _args(model: str, out: Path, resume: str = "", no_resume_opt: bool = False) -> Any:
    """The Namespace timm's train.py parses (the fields its loop reads, with its defaults)."""
    return argparse.Namespace(
        model=MODELS[model][0],
        num_classes=4,
        batch_size=4,
        epochs=EPOCHS,
        opt="adamw",
        lr=1e-3,
        weight_decay=0.05,
        sched="cosine",
        warmup_epochs=1,
        warmup_lr=1e-5,
        min_lr=1e-5,
        sched_on_updates=True,
        model_ema=True,
        model_ema_decay=0.99,
        amp=True,
        amp_dtype="float16",
        resume=resume,
        no_resume_opt=no_resume_opt,
        start_epoch=None,
        checkpoint_hist=10,
        output=str(out),
        seed=42,
    )


def _batch(epoch: int, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 * epoch + i)
    return torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 4, (4,), generator=g)


def train(model_key: str, out: Path, resume: str = "", no_resume_opt: bool = False) -> Any:
    """timm's train.py main loop, CPU, fp16 autocast with its NativeScaler."""
    timm = _import_timm()
    from timm.models import resume_checkpoint
    from timm.optim import create_optimizer_v2
    from timm.scheduler import create_scheduler_v2
    from timm.utils import CheckpointSaver, ModelEmaV3, NativeScaler

    args = _args(model_key, out, resume, no_resume_opt)
    torch.manual_seed(args.seed)
    arch, kwargs = MODELS[model_key]
    model = timm.create_model(arch, pretrained=False, num_classes=args.num_classes, **kwargs)
    optimizer = create_optimizer_v2(model, opt=args.opt, lr=args.lr, weight_decay=args.weight_decay)
    loss_scaler = NativeScaler(device="cpu")
    resume_epoch = None
    if args.resume:
        resume_epoch = resume_checkpoint(
            model,
            args.resume,
            optimizer=None if args.no_resume_opt else optimizer,
            loss_scaler=None if args.no_resume_opt else loss_scaler,
            log_info=False,
        )
    model_ema = ModelEmaV3(model, decay=args.model_ema_decay)
    if args.resume:
        from timm.models import load_checkpoint

        load_checkpoint(model_ema.module, args.resume, use_ema=True)
    lr_scheduler, num_epochs = create_scheduler_v2(
        optimizer,
        sched=args.sched,
        num_epochs=args.epochs,
        warmup_epochs=args.warmup_epochs,
        warmup_lr=args.warmup_lr,
        min_lr=args.min_lr,
        step_on_epochs=not args.sched_on_updates,
        updates_per_epoch=UPDATES,
    )
    start_epoch = resume_epoch or 0
    if start_epoch > 0:
        lr_scheduler.step(start_epoch) if not args.sched_on_updates else lr_scheduler.step_update(
            start_epoch * UPDATES
        )
    out.mkdir(parents=True, exist_ok=True)
    saver = CheckpointSaver(
        model=model,
        optimizer=optimizer,
        args=args,
        model_ema=model_ema,
        amp_scaler=loss_scaler,
        checkpoint_dir=str(out),
        recovery_dir=str(out),
        decreasing=True,
        max_history=args.checkpoint_hist,
    )
    for epoch in range(start_epoch, num_epochs):
        model.train()
        num_updates = epoch * UPDATES
        for i in range(UPDATES):
            x, y = _batch(epoch, i)
            with torch.autocast("cpu", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss_scaler(loss, optimizer, clip_grad=None, parameters=model.parameters())
            model_ema.update(model, step=num_updates)
            num_updates += 1
            lr_scheduler.step_update(num_updates=num_updates)
        lr_scheduler.step(epoch + 1, float(loss))
        saver.save_checkpoint(epoch, metric=float(loss))
    return model, optimizer


def _case(out: Path, path: Path, truth: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    state = torch.load(path, map_location="cpu", weights_only=False)  # our own file
    osd = state["optimizer"]
    ids = {str(i) for g in osd["param_groups"] for i in g["params"]}
    if ids != set(truth):
        raise AssertionError(f"{path}: optimizer ids {sorted(ids)} != {sorted(truth)}")
    return {
        "path": path.relative_to(out).as_posix(),
        "family": "torch-zip",
        "kind": "training_state",
        "setup": SETUP,
        "expect": extra.pop("expect", "clean"),
        "id_names": {"": dict(truth)},
        "epoch": state["epoch"],
        "optimizer_step": sorted({float(s["step"]) for s in osd["state"].values()}),
        "scaler": {k: float(v) for k, v in state["amp_scaler"].items()},
        "keys": sorted(state),
        **extra,
    }


def timm_cases(out: Path) -> dict[str, Any]:
    warnings.filterwarnings("ignore")
    cases: dict[str, Any] = {}
    for key in MODELS:
        run = out / f"{key}_run"
        model, opt = train(key, run)
        truth = id_names(model.named_parameters(), opt.param_groups)
        states = out / f"{key}_states"
        states.mkdir()
        for e in (1, 3):
            shutil.copy2(run / f"checkpoint-{e}.pth.tar", states / f"checkpoint-{e}.pth.tar")
            cases[f"timm_{key}_epoch{e}"] = _case(out, states / f"checkpoint-{e}.pth.tar", truth)
        resume = str(states / "checkpoint-1.pth.tar")
        train(key, out / f"{key}_resume", resume)
        cases[f"timm_{key}_resume_clean"] = _case(
            out,
            out / f"{key}_resume" / "checkpoint-3.pth.tar",
            truth,
            resume_of=f"timm_{key}_epoch1",
        )
        train(key, out / f"{key}_no_resume_opt", resume, no_resume_opt=True)
        cases[f"timm_{key}_no_resume_opt"] = _case(
            out,
            out / f"{key}_no_resume_opt" / "checkpoint-3.pth.tar",
            truth,
            expect="optimizer_moments_reset",
            resume_of=f"timm_{key}_epoch1",
        )
        if key == "vit":
            stale = out / "vit_stale_copy"
            shutil.copytree(run, stale)
            (stale / "last.pth.tar").unlink()
            shutil.copy2(run / "checkpoint-1.pth.tar", stale / "last.pth.tar")
            cases["timm_vit_stale_last"] = _case(
                out, stale / "last.pth.tar", truth, expect="stale_copy"
            )
    return cases


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {"timm": timm_cases}


def main(argv: list[str]) -> int:
    timm = _import_timm()
    version = f"torch {torch.__version__}, timm {timm.__version__}"
    return run_maker(main_out_dir(argv), "realworld_timm", version, CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
