"""Hugging Face accelerate's ``Accelerator.save_state``.

The folder holds ``model.safetensors`` (``model_<i>`` for more models), ``optimizer.bin``
(``optimizer_<i>.bin``), ``scheduler.bin`` (``scheduler_<i>.bin``) for every scheduler passed
to ``prepare`` (or ``register_for_checkpointing``), and ``random_states_<rank>.pkl`` per
process; a scheduler the script did not prepare is neither saved nor restored. The ``step`` in
``random_states_<rank>.pkl`` is the gradient-accumulation counter, not the run position; with
``automatic_checkpoint_naming`` the folders are ``checkpoint_<n>``, ``n`` counting saves.
"""

from __future__ import annotations

import re

from .spec import Evidence, WriterProfile

RANDOM_STATES = re.compile(r"^random_states_\d+\.pkl$")
OPTIMIZER = re.compile(r"^optimizer(_\d+)?\.bin$")


def detect(ev: Evidence) -> list[str] | None:
    states = sorted(n for n in ev.files if RANDOM_STATES.match(n))
    optimizers = sorted(n for n in ev.files if OPTIMIZER.match(n))
    if not states or not optimizers:
        return None
    return [f"{', '.join(states[:2])} beside {', '.join(optimizers[:2])} (save_state layout)"]


# The declaration every writer makes: alike in shape by design, the registry reads them all.
PROFILE = WriterProfile(
    name="accelerate",
    title="accelerate save_state",
    detect=detect,
    priority=50,
    parts={
        "model": ("model.safetensors", "model_<i>.safetensors", "pytorch_model.bin"),
        "optimizer": ("optimizer.bin", "optimizer_<i>.bin"),
        "scheduler": ("scheduler.bin", "scheduler_<i>.bin"),
        "rng": ("random_states_<rank>.pkl",),
    },
    optimizer="saved",
    scheduler="saved",
    rng="saved",
    notes="Saves and restores only the objects passed to prepare(); a scheduler the script "
    "steps without preparing it restarts at every resume.",
)
