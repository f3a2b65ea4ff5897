"""Megatron-LM's ``save_checkpoint`` (legacy ``mp_rank_XX/model_optim_rng.pt`` and the
dist-checkpointing ``common.pt``).

A save records ``iteration``, ``checkpoint_version``, ``args`` (the run's arguments), the
model, ``optimizer`` and ``opt_param_scheduler`` (its ``num_steps`` counts samples:
iterations × global batch size) and ``rng_state`` unless ``--no-save-rng``. ``iteration``
counts optimizer steps (one global batch each; a step skipped for an fp16 overflow still
counts). The save folder is ``iter_<7 digits>``; ``latest_checkpointed_iteration.txt`` names
the newest.
"""

from __future__ import annotations

from .spec import Counter, Evidence, WriterProfile


def detect(ev: Evidence) -> list[str] | None:
    version = ev.value("checkpoint_version")
    if version is None or ev.value("iteration") is None:
        return None
    return [f"checkpoint_version {version!s} beside iteration (Megatron's save_checkpoint)"]


# The declaration every writer makes: alike in shape by design, the registry reads them all.
PROFILE = WriterProfile(
    name="megatron",
    title="Megatron-LM",
    detect=detect,
    priority=40,
    parts={
        "model": ("model", "model0"),
        "optimizer": ("optimizer",),
        "scheduler": ("opt_param_scheduler",),
        "rng": ("rng_state",),
        "run": ("iteration", "args"),
    },
    counters=(Counter("iteration", "optimizer_steps", "global batches (optimizer steps)"),),
    optimizer="optional",
    scheduler="saved",
    rng="optional",
    pointers=("latest_checkpointed_iteration.txt",),
    notes="--no-load-optim / --no-load-rng skip parts at resume; --no-save-optim / "
    "--no-save-rng at save.",
)
