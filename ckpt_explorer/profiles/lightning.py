"""PyTorch Lightning's ``Trainer.save_checkpoint`` (``ModelCheckpoint`` callbacks).

One ``.ckpt`` holds ``state_dict``, ``optimizer_states`` (one per optimizer), ``lr_schedulers``
(one per configured scheduler; none when ``configure_optimizers`` returns none),
``epoch``, ``global_step``, ``loops`` (the fit loop's progress counters), ``callbacks``,
``pytorch-lightning_version`` and the hyperparameters. ``global_step`` counts optimizer steps
(``accumulate_grad_batches`` micro-batches make one); no RNG state is saved (``seed_everything``
re-seeds). ``ModelCheckpoint(save_last=True)`` writes ``last.ckpt``, a copy of the newest save;
save names carry ``step=<global_step>``.
"""

from __future__ import annotations

from .spec import Counter, Evidence, WriterProfile

VERSION_KEY = "pytorch-lightning_version"


def detect(ev: Evidence) -> list[str] | None:
    version = ev.values.get(VERSION_KEY)
    if version is None or "global_step" not in ev.values or "state_dict" not in ev.keys:
        return None
    return [f"{VERSION_KEY} {version!s} beside state_dict and global_step"]


# The declaration every writer makes: alike in shape by design, the registry reads them all.
PROFILE = WriterProfile(
    name="lightning",
    title="Lightning Trainer",
    detect=detect,
    priority=20,
    parts={
        "model": ("state_dict",),
        "optimizer": ("optimizer_states",),
        "scheduler": ("lr_schedulers",),
        "run": ("global_step", "epoch", "loops"),
    },
    counters=(
        Counter("global_step", "optimizer_steps", "optimizer steps of all optimizers"),
        Counter("epoch", "epochs", "epochs started"),
    ),
    accumulation=("accumulate_grad_batches",),
    optimizer="saved",
    scheduler="optional",
    rng="not_saved",
    copies=("last.ckpt",),
    save_name=r"step=(\d+)",
    save_counter="global_step",
    notes="ModelCheckpoint(save_last=True) keeps last.ckpt a copy of the newest save; "
    "fit(ckpt_path=...) restores optimizer, schedulers and loops.",
)
