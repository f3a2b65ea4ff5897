"""The Hugging Face ``transformers`` Trainer (``Trainer._save_checkpoint``).

A ``checkpoint-<global_step>`` folder holds the model (``save_pretrained``), ``optimizer.pt``,
``scheduler.pt``, ``rng_state.pth`` (``rng_state_<rank>.pth`` when distributed; written unless
``save_only_model``), ``trainer_state.json`` and ``training_args.bin``. ``global_step`` counts
optimizer steps (``TrainerState.global_step`` is advanced once per accumulated update), so the
optimizer's ``step`` and the scheduler's ``last_epoch`` equal it whatever
``gradient_accumulation_steps`` is; ``epoch`` is a float (fraction of the epoch done).
``_load_optimizer_and_scheduler`` loads ``optimizer.pt`` and ``scheduler.pt`` together or
neither. The output folder has no pointer file: resume picks the highest ``checkpoint-N``.
"""

from __future__ import annotations

from .spec import Counter, Evidence, WriterProfile

TRAINER_STATE = "trainer_state.json"
STATE_KEYS = ("global_step", "log_history")


def detect(ev: Evidence) -> list[str] | None:
    has_state = TRAINER_STATE in ev.files or TRAINER_STATE in ev.keys
    keys = [k for k in STATE_KEYS if ev.value(f"{TRAINER_STATE}/{k}") is not None]
    if not (has_state and len(keys) == len(STATE_KEYS)):
        return None
    out = [f"{TRAINER_STATE} holds {' and '.join(keys)}"]
    if "training_args.bin" in ev.files or "training_args.bin" in ev.keys:
        out.append("training_args.bin beside it")
    return out


# The declaration every writer makes: alike in shape by design, the registry reads them all.
PROFILE = WriterProfile(
    name="hf-trainer",
    title="HF Trainer",
    detect=detect,
    priority=10,
    parts={
        "model": ("model.safetensors", "pytorch_model.bin", "adapter_model.safetensors"),
        "optimizer": ("optimizer.pt",),
        "scheduler": ("scheduler.pt",),
        "rng": ("rng_state.pth", "rng_state_<rank>.pth"),
        "run": (TRAINER_STATE,),
        "args": ("training_args.bin",),
    },
    counters=(
        Counter("global_step", "optimizer_steps", "accumulated updates (optimizer steps)"),
        Counter("epoch", "epochs", "epochs done, fractional"),
    ),
    accumulation=("gradient_accumulation_steps",),
    optimizer="saved",
    scheduler="saved",
    rng="saved",
    save_name=r"^checkpoint-(\d+)$",
    save_counter="global_step",
    notes="optimizer.pt and scheduler.pt are loaded together or not at all; "
    "save_only_model=True writes the model only.",
)
