"""LitGPT's pretrain and finetune scripts (Lightning Fabric).

Every ``save_interval`` optimizer steps they write ``out_dir/step-<step_count>/`` (8 digits in
pretrain, 6 in finetune) and at the end ``final/``: ``lit_model.pth`` (``fabric.save`` of
``model``, ``optimizer``, ``iter_num``, ``step_count``; pretrain adds the loader's
``train_dataloader`` state, finetune its ``scheduler``) beside ``model_config.yaml`` and
``hyperparameters.yaml``. ``iter_num`` counts micro-batches; ``step_count`` counts optimizer
steps (``iter_num`` over ``global_batch_size / (devices * micro_batch_size)``, the
accumulation factor). Pretrain saves no LR scheduler: ``get_lr`` recomputes the rate from
``iter_num`` each step. No RNG state is saved (``seed_everything`` at start). There is no
pointer file: ``--resume auto`` takes the highest ``step-*`` folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .spec import Counter, Evidence, WriterProfile

SAVE_NAME = r"^step-(\d+)$"
WEIGHTS = "lit_model.pth"
CONFIG = "model_config.yaml"


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def facts(ev: Evidence) -> Mapping[str, Any]:
    """``gradient_accumulation_iters`` as LitGPT computes it from the recorded arguments."""
    batch = _int(ev.value("train.global_batch_size"))
    micro = _int(ev.value("train.micro_batch_size"))
    devices = _int(ev.value("devices")) or 1
    nodes = _int(ev.value("num_nodes")) or 1
    if batch is None or micro is None or batch % (micro * devices * nodes):
        return {}
    return {"gradient_accumulation_iters": batch // (micro * devices * nodes)}


def detect(ev: Evidence) -> list[str] | None:
    step, it = ev.value("step_count"), ev.value("iter_num")
    if not (isinstance(step, int) and isinstance(it, int)) or "optimizer" not in ev.kinds:
        return None
    out = [f"iter_num {it} + step_count {step} beside the model and optimizer (LitGPT fit state)"]
    if CONFIG in ev.files or CONFIG in ev.siblings:
        out.append(f"{CONFIG} beside {WEIGHTS}")
    return out


# The declaration every writer makes: alike in shape by design, the registry reads them all.
PROFILE = WriterProfile(
    name="litgpt",
    title="LitGPT (Fabric)",
    detect=detect,
    priority=40,
    parts={
        "model": (f"{WEIGHTS}:model",),
        "optimizer": (f"{WEIGHTS}:optimizer",),
        "scheduler": (f"{WEIGHTS}:scheduler",),
        "run": (f"{WEIGHTS}:iter_num", f"{WEIGHTS}:step_count", f"{WEIGHTS}:train_dataloader"),
        "args": ("hyperparameters.yaml", CONFIG),
    },
    counters=(
        Counter("step_count", "optimizer_steps", "optimizer steps"),
        Counter("iter_num", "micro_batches", "micro-batches (forward/backward passes)"),
    ),
    accumulation=("gradient_accumulation_iters",),
    optimizer="saved",
    scheduler="rebuilt",
    scheduler_from="iter_num",
    rng="not_saved",
    save_name=SAVE_NAME,
    save_counter="step_count",
    facts=facts,
    notes="pretrain recomputes the LR from iter_num (finetune saves its scheduler); no RNG.",
)
