"""A torch loop with ``torch.optim.swa_utils``: ``AveragedModel`` (SWA and/or EMA) and ``SWALR``.

The recipe of torch's SWA documentation: the main LR scheduler steps once per epoch until
``swa_start``; from then on ``swa_model.update_parameters(model)`` and ``swa_scheduler.step()``
once per epoch (``SWALR``, whose state holds ``anneal_epochs`` and ``_anneal_strategy``). So the
main scheduler and the SWA scheduler hand over: together they have stepped once per epoch,
``epoch + 1`` times after the save of epoch ``epoch`` (0-based; ``epoch`` times where the loop
saves the epoch count). An EMA copy (``AveragedModel(multi_avg_fn=get_ema_multi_avg_fn(d))``)
is usually updated once per optimizer step; each ``AveragedModel`` records ``n_averaged``. The
loop saves what its author wrote (commonly ``model``, ``swa_model``, ``optimizer``,
``scheduler``, ``swa_scheduler``, ``scaler``, ``epoch``); no RNG state unless saved by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .spec import Counter, Evidence, WriterProfile

SWALR_KEYS = ("anneal_epochs", "_anneal_strategy")


def _schedulers(ev: Evidence) -> tuple[str | None, list[str]]:
    """(the SWALR state's key, the other scheduler states' keys) among the plain values."""
    swa, others = None, []
    for key, value in ev.values.items():
        if not isinstance(value, dict) or not isinstance(value.get("last_epoch"), int):
            continue
        if all(k in value for k in SWALR_KEYS):
            swa = key
        elif "base_lrs" in value:
            others.append(key)
    return swa, others


def facts(ev: Evidence) -> Mapping[str, Any]:
    """``epoch_schedulers``: the per-epoch schedulers that hand over (key -> steps taken) and
    ``epochs_done``: the saved epoch index."""
    swa, others = _schedulers(ev)
    epoch = ev.value("epoch")
    if swa is None or len(others) != 1 or isinstance(epoch, bool) or not isinstance(epoch, int):
        return {}
    steps = {k: ev.values[k]["last_epoch"] for k in (others[0], swa)}
    return {"epoch_schedulers": steps, "epochs_done": epoch}


def detect(ev: Evidence) -> list[str] | None:
    swa, others = _schedulers(ev)
    if swa is None:
        return None
    out = [f"{swa} is an SWALR state ({', '.join(SWALR_KEYS)})"]
    if others:
        out.append(f"main scheduler {others[0]} beside it")
    return out


# The declaration every writer makes: alike in shape by design, the registry reads them all.
PROFILE = WriterProfile(
    name="torch-swa",
    title="torch SWA loop (swa_utils)",
    detect=detect,
    priority=60,
    parts={
        "model": ("model",),
        "averaged": ("swa_model", "ema_model"),
        "optimizer": ("optimizer",),
        "scheduler": ("scheduler", "swa_scheduler"),
        "scaler": ("scaler",),
        "run": ("epoch",),
    },
    counters=(
        Counter("epoch", "epochs", "the epoch just finished"),
        Counter("scheduler.last_epoch", "epochs", "the main scheduler: epochs up to swa_start"),
        Counter("swa_scheduler.last_epoch", "epochs", "SWALR: epochs after swa_start"),
    ),
    optimizer="saved",
    scheduler="saved",
    rng="optional",
    facts=facts,
    notes="The main scheduler and SWALR each step once per epoch, one after the other.",
)
