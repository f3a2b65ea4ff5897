"""Resume pairs for calibrating the resume doctor: a plain torch loop training a CNN with
BatchNorm, saved and resumed the way such loops do it, correct and with the faults users make.

Usage: ``python tests/fixture_makers/resume_calib_maker.py OUT_DIR``

The loop (torch only, CPU, deterministic): a 12-block ``Conv2d`` / ``BatchNorm2d`` / ``ReLU``
network (many same-shaped small tensors: every block's BN weight and bias and conv bias have 16
elements) trained by ``AdamW`` with decay / no-decay groups and a warm-up ``LambdaLR`` on
synthetic images, a shuffling ``DataLoader`` (the global torch RNG orders each epoch) and a
random flip (drawn from the same RNG). Every epoch (8 steps) it writes ONE ``torch.save`` file
``step_<n>.pt`` holding ``model``, ``optimizer``, ``scheduler``, ``step``, ``epoch`` and
``rng_state`` (``torch.get_rng_state()``), and copies it to ``latest.pt``. A resume re-seeds
(as a script does at start), builds model, optimizer and scheduler, loads the file and restores
each part, then runs on.

Cases (the corpus contract ``setup``, ``expect``, ``resume_of`` is in tests/realworld_check.py):

* ``cnn_step16`` / ``cnn_step24``: the uninterrupted run (``run/``, steps 8, 16, 24);
  ``cnn_step24`` is also a correct pair with ``cnn_step16`` (an exact continuation).
* ``cnn_step16_copy``: a byte copy of step 16 (A == B).
* ``cnn_resume_clean``: resumed from step 16, saved at 24: equal to ``cnn_step24`` bit for bit
  (the maker checks it). Every resume below starts from step 16 and saves at 24.
* ``cnn_scheduler_not_restored``, ``cnn_optimizer_not_restored`` (fresh moments and step),
  ``cnn_param_order`` (the optimizer's groups built from ``sorted(named_parameters())``:
  ``blocks.10`` sorts before ``blocks.2``, so same-shaped parameters trade ids),
  ``cnn_rng_lost`` (everything restored but the RNG state:
  epoch 3 sees epoch 1's order and flips again), ``cnn_other_run`` (the file loaded is step 8 of
  another run's step 16, seed 1, written in ``other/``).
* ``cnn_stale_latest``: ``stale/`` holds steps 8, 16 and 24, and a ``latest.pt`` left at step
  16's copy (the copy after step 24 never happened); resumed from ``latest.pt`` and saved at
  step 24 in ``stale_resumed/``: the pair is (``latest.pt``, that state).

``long_sgd_*`` / ``long_adamw_*``: a 20-block variant trained 48 steps without interruption
with SGD (Nesterov momentum) and with AdamW, pairs 16 -> 24 and 8 -> 48: correct, and full of
same-shaped small tensors.

The same network under ``lightning.Trainer`` (``deterministic=True``, ``ModelCheckpoint`` every
8 steps with ``save_last=True``), resumed with ``trainer.fit(..., ckpt_path=...)``: a clean
resume from step 16 (``lit_resume_clean``), a resume from another run's step 16 (seed 1,
``lit_other_run``), and a resume from a ``last.ckpt`` put back to step 16's copy while step 24
lies beside it (``lit_resumed_from_stale_last``).

And under mmengine's ``Runner`` (``IterBasedTrainLoop``, ``CheckpointHook`` every 8 iterations,
``LinearLR`` then ``CosineAnnealingLR``, ``randomness=dict(seed=0, deterministic=True)``):
``resume=True, load_from=iter_16.pth`` (bit-identical to the run's ``iter_24.pth``, checked);
``load_from`` without ``resume=True`` (the weights alone: optimizer, schedulers and ``iter``
start again); a resume from another run's ``iter_16.pth`` (seed 1); and ``resume=True``
following a ``last_checkpoint`` that still names ``iter_16.pth`` while ``iter_24.pth`` lies
beside it. mmengine 0.10 calls ``torch.load`` without ``weights_only`` on resume, which torch
>= 2.6 refuses for its message hub: the maker sets ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` as
its users do.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from _manifest import fresh_dir, main_out_dir, run_maker
from torch import nn

SETUP = "plain torch loop, CNN with BatchNorm (one torch.save per epoch)"
BLOCKS, WIDTH, IMAGES, BATCH = 12, 16, 64, 8
STEPS_PER_EPOCH = IMAGES // BATCH
LR, WARMUP = 2e-3, 4


class Net(nn.Module):
    def __init__(self, blocks: int = BLOCKS) -> None:
        super().__init__()
        layers = []
        for i in range(blocks):
            layers.append(
                nn.Sequential(
                    nn.Conv2d(3 if i == 0 else WIDTH, WIDTH, 3, padding=1),
                    nn.BatchNorm2d(WIDTH),
                    nn.ReLU(),
                )
            )
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Linear(WIDTH, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x).mean(dim=(2, 3)))


def _data() -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(99)
    x = torch.randn(IMAGES, 3, 8, 8, generator=g)
    y = torch.randint(0, 10, (IMAGES,), generator=g)
    return torch.utils.data.TensorDataset(x, y)


def _groups(model: nn.Module, order: str) -> list[dict[str, Any]]:
    named = list(model.named_parameters())
    if order == "sorted":
        named = sorted(named)
    decay = [p for n, p in named if p.ndim > 1]
    no_decay = [p for n, p in named if p.ndim <= 1]
    return [
        {"params": decay, "weight_decay": 0.05},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def _warmup(step: int) -> float:
    return min(1.0, (step + 1) / WARMUP)


class Loop:
    """One training script's run: seed, build, optionally resume, train, save."""

    def __init__(
        self, seed: int = 0, order: str = "model", blocks: int = BLOCKS, sgd: bool = False
    ) -> None:
        torch.manual_seed(seed)
        self.model = Net(blocks)
        groups = _groups(self.model, order)
        self.opt: torch.optim.Optimizer = (
            torch.optim.SGD(groups, lr=0.05, momentum=0.9, nesterov=True)
            if sgd
            else torch.optim.AdamW(groups, lr=LR)
        )
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, _warmup)
        self.step = 0
        self.loader = torch.utils.data.DataLoader(_data(), batch_size=BATCH, shuffle=True)

    def resume(self, path: Path, skip: str = "") -> None:
        state = torch.load(path, weights_only=True)
        self.model.load_state_dict(state["model"])
        if skip != "optimizer":
            self.opt.load_state_dict(state["optimizer"])
        if skip != "scheduler":
            self.sched.load_state_dict(state["scheduler"])
        if skip != "rng":
            torch.set_rng_state(state["rng_state"])
        self.step = state["step"]

    def train_epoch(self) -> None:
        self.model.train()
        for x, y in self.loader:
            flip = torch.rand(x.shape[0]) < 0.5
            x = torch.where(flip[:, None, None, None], x.flip(-1), x)
            loss = nn.functional.cross_entropy(self.model(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.sched.step()
            self.step += 1

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"step_{self.step}.pt"
        torch.save(
            {
                "model": self.model.state_dict(),
                "optimizer": self.opt.state_dict(),
                "scheduler": self.sched.state_dict(),
                "step": self.step,
                "epoch": self.step // STEPS_PER_EPOCH,
                "rng_state": torch.get_rng_state(),
            },
            path,
        )
        shutil.copyfile(path, folder / "latest.pt")
        return path


def _same(a: Path, b: Path) -> None:
    sa, sb = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    for k, t in sa["model"].items():
        if not torch.equal(t, sb["model"][k]):
            raise AssertionError(f"resume not bit-identical: {k}")
    for pid, st in sa["optimizer"]["state"].items():
        for k, t in st.items():
            if not torch.equal(t, sb["optimizer"]["state"][pid][k]):
                raise AssertionError(f"resume not bit-identical: state {pid} {k}")


def _differs(a: Path, b: Path) -> None:
    sa, sb = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    if all(torch.equal(t, sb["model"][k]) for k, t in sa["model"].items()):
        raise AssertionError(f"planted fault left no trace: {b}")


def cases(out: Path) -> Mapping[str, Any]:
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    fresh_dir(out / "cnn")
    root = out / "cnn"

    def case(cid: str, path: Path, expect: str = "clean", resume_of: str | None = None) -> None:
        entry: dict[str, Any] = {
            "path": path.relative_to(out).as_posix(),
            "family": "torch_pickle",
            "kind": "training_state",
            "setup": SETUP,
            "expect": expect,
        }
        if resume_of:
            entry["resume_of"] = resume_of
        made[cid] = entry

    made: dict[str, Any] = {}
    run = Loop()
    for _ in range(2):
        run.train_epoch()
        a = run.save(root / "run")
    run.train_epoch()
    ref = run.save(root / "run")
    case("cnn_step16", a)
    case("cnn_step24", ref, resume_of="cnn_step16")
    copy = root / "copy" / "step_16.pt"
    copy.parent.mkdir()
    shutil.copyfile(a, copy)
    case("cnn_step16_copy", copy, resume_of="cnn_step16")

    def resumed(cid: str, folder: str, expect: str, **kw: Any) -> Path:
        order = kw.pop("order", "model")
        loop = Loop(order=order)
        loop.resume(kw.pop("source", a), **kw)
        loop.train_epoch()
        path = loop.save(root / folder)
        case(cid, path, expect, "cnn_step16")
        return path

    _same(ref, resumed("cnn_resume_clean", "resumed", "clean"))
    faults = {
        "cnn_scheduler_not_restored": ("scheduler_not_restored", {"skip": "scheduler"}),
        "cnn_optimizer_not_restored": ("optimizer_moments_reset", {"skip": "optimizer"}),
        "cnn_param_order": ("param_order_changed", {"order": "sorted"}),
        "cnn_rng_lost": ("rng_not_restored", {"skip": "rng"}),
    }
    for cid, (expect, kw) in faults.items():
        _differs(ref, resumed(cid, cid.removeprefix("cnn_"), expect, **kw))
    # name-sorted groups move blocks.10/11 before blocks.2: only among equal shapes (block 0,
    # whose conv takes the 3 input channels, and the head keep their places), so the file is
    # a correct state's twin: only the pair shows it
    made["cnn_param_order"]["shape_visible"] = False

    other = Loop(seed=1)
    for _ in range(2):
        other.train_epoch()
    other_a = other.save(root / "other")
    _differs(ref, resumed("cnn_other_run", "other_run", "resumed_from_another_run", source=other_a))

    # stale pointer: steps 8, 16, 24 written; latest.pt left at step 16
    stale = Loop()
    for _ in range(2):
        stale.train_epoch()
        sixteen = stale.save(root / "stale")
    stale.train_epoch()
    twenty_four = root / "stale" / "step_24.pt"
    torch.save(
        {
            "model": stale.model.state_dict(),
            "optimizer": stale.opt.state_dict(),
            "scheduler": stale.sched.state_dict(),
            "step": stale.step,
            "epoch": stale.step // STEPS_PER_EPOCH,
            "rng_state": torch.get_rng_state(),
        },
        twenty_four,
    )  # saved, but the copy to latest.pt did not happen
    latest = root / "stale" / "latest.pt"
    assert latest.read_bytes() == sixteen.read_bytes()
    case("cnn_stale_pointer", latest)
    loop = Loop()
    loop.resume(latest)
    loop.train_epoch()
    case(
        "cnn_stale_latest", loop.save(root / "stale_resumed"), "stale_pointer", "cnn_stale_pointer"
    )
    return made


LONG = "plain torch loop, 20-block CNN with BatchNorm, {} (long uninterrupted stretches)"


def long_cases(out: Path) -> Mapping[str, Any]:
    """Correct pairs over long stretches of one uninterrupted run (steps 8 -> 48, 16 -> 24),
    with SGD (Nesterov momentum, as timm trains ResNets) and AdamW: 82 same-shaped
    16-element BatchNorm / bias tensors whose chance correlations once read as a reorder."""
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    made: dict[str, Any] = {}
    for name, sgd in (("sgd", True), ("adamw", False)):
        folder = fresh_dir(out / f"long_{name}")
        run = Loop(blocks=20, sgd=sgd)
        for _ in range(6):
            run.train_epoch()
            run.save(folder)
        setup = LONG.format("SGD Nesterov momentum" if sgd else "AdamW")
        for step, resume_of in ((8, None), (16, None), (24, 16), (48, 8)):
            made[f"long_{name}_step{step}"] = {
                "path": (folder / f"step_{step}.pt").relative_to(out).as_posix(),
                "family": "torch_pickle",
                "kind": "training_state",
                "setup": setup,
                "expect": "clean",
                **({"resume_of": f"long_{name}_step{resume_of}"} if resume_of else {}),
            }
    return made


LIGHTNING = "Lightning Trainer, CNN with BatchNorm (ModelCheckpoint, save_last)"


def _lightning_module() -> type:
    import lightning as L

    class Classifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = Net()

        def training_step(self, batch: Any, _: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            opt = torch.optim.AdamW(_groups(self.net, "model"), lr=LR)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, _warmup)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    return Classifier


def _fit(folder: Path, max_steps: int, seed: int = 0, ckpt_path: Path | None = None) -> None:
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    L.seed_everything(seed, verbose=False)
    trainer = L.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        deterministic=True,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            ModelCheckpoint(
                dirpath=folder, every_n_train_steps=STEPS_PER_EPOCH, save_top_k=-1, save_last=True
            )
        ],
    )
    loader = torch.utils.data.DataLoader(_data(), batch_size=BATCH, shuffle=True)
    trainer.fit(_lightning_module()(), loader, ckpt_path=ckpt_path)


def _step_file(folder: Path, step: int) -> Path:
    found = sorted(folder.glob(f"epoch=*-step={step}.ckpt"))
    if len(found) != 1:
        raise AssertionError(f"expected one step {step} checkpoint in {folder}: {found}")
    return found[0]


def lightning_cases(out: Path) -> Mapping[str, Any]:
    import warnings

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    root = fresh_dir(out / "lightning")
    made: dict[str, Any] = {}

    def case(cid: str, path: Path, expect: str = "clean", resume_of: str | None = None) -> None:
        made[cid] = {
            "path": path.relative_to(out).as_posix(),
            "family": "torch-zip",
            "kind": "training_state",
            "setup": LIGHTNING,
            "expect": expect,
            **({"resume_of": resume_of} if resume_of else {}),
        }

    _fit(root / "run", 3 * STEPS_PER_EPOCH)
    base = root / "base.ckpt"
    shutil.copyfile(_step_file(root / "run", 2 * STEPS_PER_EPOCH), base)
    case("lit_step16", base)
    _fit(root / "resumed", 3 * STEPS_PER_EPOCH, ckpt_path=base)
    case("lit_resume_clean", _step_file(root / "resumed", 24), resume_of="lit_step16")

    _fit(root / "other", 2 * STEPS_PER_EPOCH, seed=1)
    _fit(root / "other_resumed", 3 * STEPS_PER_EPOCH, ckpt_path=_step_file(root / "other", 16))
    case(
        "lit_other_run",
        _step_file(root / "other_resumed", 24),
        "resumed_from_another_run",
        "lit_step16",
    )

    # stale last.ckpt: run/ has steps 8, 16, 24; last.ckpt put back to step 16's copy
    stale = root / "stale"
    shutil.copytree(root / "run", stale)
    shutil.copyfile(_step_file(stale, 16), stale / "last.ckpt")
    case("lit_stale_last", stale / "last.ckpt", "stale_copy")  # validate must warn on it
    _fit(root / "stale_resumed", 3 * STEPS_PER_EPOCH, ckpt_path=stale / "last.ckpt")
    case(
        "lit_resumed_from_stale_last",
        _step_file(root / "stale_resumed", 24),
        "stale_pointer",
        "lit_stale_last",
    )
    return made


MMENGINE = "mmengine Runner, CNN with BatchNorm (CheckpointHook, IterBasedTrainLoop)"


def _mm_runner(work: Path, iters: int, seed: int = 0, **kw: Any) -> Any:
    from mmengine.model import BaseModel
    from mmengine.runner import Runner

    class Classifier(BaseModel):
        def __init__(self) -> None:
            super().__init__()
            self.net = Net()

        def forward(self, inputs: Any, labels: Any, mode: str = "tensor") -> Any:
            out = self.net(inputs)
            if mode == "loss":
                return {"loss": nn.functional.cross_entropy(out, labels)}
            return out

    class Images(torch.utils.data.Dataset):
        def __init__(self) -> None:
            self.data = _data()

        def __len__(self) -> int:
            return len(self.data)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            x, y = self.data[i]
            return {"inputs": x, "labels": y}

    return Runner(
        model=Classifier(),
        work_dir=str(work),
        train_dataloader={
            "dataset": Images(),
            "sampler": {"type": "DefaultSampler", "shuffle": True},
            "batch_size": BATCH,
            "collate_fn": {"type": "default_collate"},
        },
        train_cfg={"by_epoch": False, "max_iters": iters},
        optim_wrapper={"optimizer": {"type": "AdamW", "lr": LR, "weight_decay": 0.05}},
        param_scheduler=[
            {"type": "LinearLR", "start_factor": 0.1, "by_epoch": False, "begin": 0, "end": 8},
            {"type": "CosineAnnealingLR", "by_epoch": False, "begin": 8, "end": 64},
        ],
        default_hooks={
            "checkpoint": {
                "type": "CheckpointHook",
                "interval": STEPS_PER_EPOCH,
                "by_epoch": False,
            },
            "logger": {"type": "LoggerHook", "interval": 100},
        },
        randomness={"seed": seed, "deterministic": True},
        launcher="none",
        **kw,
    )


def mmengine_cases(out: Path) -> Mapping[str, Any]:
    import os
    import warnings

    warnings.filterwarnings("ignore")
    # mmengine 0.10's resume calls torch.load without weights_only; torch >= 2.6 refuses its
    # message hub then: its users set this (the files are their own)
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    root = fresh_dir(out / "mmengine")
    made: dict[str, Any] = {}

    def case(cid: str, path: Path, expect: str = "clean", resume_of: str | None = None) -> None:
        made[cid] = {
            "path": path.relative_to(out).as_posix(),
            "family": "torch-zip",
            "kind": "training_state",
            "setup": MMENGINE,
            "expect": expect,
            **({"resume_of": resume_of} if resume_of else {}),
        }

    _mm_runner(root / "run", 24).train()
    case("mm_iter16", root / "run" / "iter_16.pth")
    _mm_runner(
        root / "resumed", 24, resume=True, load_from=str(root / "run" / "iter_16.pth")
    ).train()
    _same_weights(root / "run" / "iter_24.pth", root / "resumed" / "iter_24.pth")
    case("mm_resume_clean", root / "resumed" / "iter_24.pth", resume_of="mm_iter16")
    # load_from without resume=True: the weights alone; optimizer, schedulers, iter from 0
    _mm_runner(root / "weights_only", 8, load_from=str(root / "run" / "iter_16.pth")).train()
    case(
        "mm_load_from_without_resume",
        root / "weights_only" / "iter_8.pth",
        "optimizer_moments_reset",
        "mm_iter16",
    )
    made["mm_load_from_without_resume"]["also"] = ["scheduler_not_restored"]
    _mm_runner(root / "other", 16, seed=1).train()
    _mm_runner(
        root / "other_resumed", 24, resume=True, load_from=str(root / "other" / "iter_16.pth")
    ).train()
    case(
        "mm_other_run",
        root / "other_resumed" / "iter_24.pth",
        "resumed_from_another_run",
        "mm_iter16",
    )
    # stale pointer: last_checkpoint left naming iter_16 while iter_24 lies beside it
    stale = root / "stale"
    shutil.copytree(root / "run", stale)
    (stale / "last_checkpoint").write_text(str(stale / "iter_16.pth"))
    case("mm_stale_pointed", stale / "iter_16.pth")
    # resume=True alone follows a work dir's last_checkpoint; the resumed run writes beside
    # (into its own work dir, whose last_checkpoint names the stale one)
    (root / "stale_resumed").mkdir()
    (root / "stale_resumed" / "last_checkpoint").write_text(str(stale / "iter_16.pth"))
    _mm_runner(root / "stale_resumed", 24, resume=True).train()
    case(
        "mm_resumed_from_stale_pointer",
        root / "stale_resumed" / "iter_24.pth",
        "stale_pointer",
        "mm_stale_pointed",
    )
    return made


def _same_weights(a: Path, b: Path) -> None:
    sa = torch.load(a, map_location="cpu", weights_only=False)  # the maker's own files
    sb = torch.load(b, map_location="cpu", weights_only=False)
    for k, t in sa["state_dict"].items():
        if not torch.equal(t, sb["state_dict"][k]):
            raise AssertionError(f"mmengine resume not bit-identical: {k}")


CASES: dict[str, Callable[[Path], Mapping[str, Any]]] = {
    "cnn": cases,
    "long": long_cases,
    "lightning": lightning_cases,
    "mmengine": mmengine_cases,
}


def main(argv: list[str]) -> int:
    return run_maker(main_out_dir(argv), "resume_calib", torch.__version__, CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
