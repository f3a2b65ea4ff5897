"""nanoGPT's ``train.py`` and the one-file loops written after it.

One ``ckpt.pt`` = ``torch.save({"model", "optimizer", "model_args", "iter_num",
"best_val_loss", "config"})``; loops modelled on it add a ``scheduler`` state beside them.
``iter_num`` counts optimizer steps: gradient accumulation happens inside one iteration
(``gradient_accumulation_steps`` micro-steps, then one ``optimizer.step()``, then
``iter_num += 1``). nanoGPT itself keeps no scheduler object (``get_lr(iter_num)`` sets the lr
each iteration: rebuilt from ``iter_num``) and saves no RNG state. LitGPT's states also hold
``iter_num`` but count micro-batches there; they carry ``step_count`` and are not this writer's.
"""

from __future__ import annotations

from .spec import Counter, Evidence, WriterProfile

REQUIRED = ("model", "optimizer", "iter_num")
ONE_OF = ("config", "model_args", "best_val_loss")


def detect(ev: Evidence) -> list[str] | None:
    if not all(k in ev.keys for k in REQUIRED) or "step_count" in ev.keys:
        return None
    beside = [k for k in ONE_OF if k in ev.keys]
    if not beside or ev.files:  # one file, not a folder
        return None
    return [f"model, optimizer and iter_num beside {', '.join(beside)} (nanoGPT's ckpt.pt)"]


# The declaration every writer makes: alike in shape by design, the registry reads them all.
PROFILE = WriterProfile(
    name="nanogpt",
    title="nanoGPT-style loop",
    detect=detect,
    priority=60,
    parts={"model": ("model",), "optimizer": ("optimizer",), "run": ("iter_num",)},
    counters=(Counter("iter_num", "optimizer_steps", "optimizer steps (iterations)"),),
    accumulation=("gradient_accumulation_steps",),
    optimizer="saved",
    scheduler="optional",
    scheduler_from="iter_num",
    rng="optional",
    notes="nanoGPT sets the lr from iter_num each iteration; loops after it may save a "
    "scheduler beside.",
)
