"""timm's training script: ``timm.utils.CheckpointSaver`` and ``resume_checkpoint``.

``CheckpointSaver.save_checkpoint(epoch)`` writes ``last.pth.tar`` and copies (hard-links) it to
``checkpoint-<epoch>.pth.tar`` (``model_best.pth.tar`` for the best metric; recovery files
``recovery-<epoch>-<batch>.pth.tar`` mid-epoch). A save holds ``epoch`` (the epoch just
finished: ``resume_checkpoint`` returns ``epoch + 1`` for ``version`` 2), ``arch``,
``state_dict``, ``optimizer``, ``version``, ``args`` (train.py's argparse Namespace),
``amp_scaler`` (the GradScaler), ``state_dict_ema`` (ModelEma), ``metric`` and ``saver`` (the
saver's history). No LR scheduler state: train.py rebuilds the scheduler and steps it to the
resume epoch (``lr_scheduler.step(start_epoch)`` or ``step_update`` per update). No RNG state.
``--no-resume-opt`` resumes the weights only: optimizer and loss scaler start afresh; the
recorded ``args`` say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .spec import Counter, Evidence, WriterProfile

SAVE_NAME = r"^checkpoint-(\d+)\.pth\.tar$"
LAST = "last.pth.tar"


def _args(ev: Evidence) -> dict[str, Any]:
    """train.py's arguments: the Namespace's fields (an inert stand-in keeps them as its
    ``state``), or a plain dict."""
    args = ev.value("args")
    state = args if isinstance(args, dict) else getattr(args, "state", None)
    return state if isinstance(state, dict) else {}


def facts(ev: Evidence) -> Mapping[str, Any]:
    """``not_restored``: the parts the recorded arguments say the resume left fresh
    (``--resume`` with ``--no-resume-opt``: optimizer and AMP loss scaler)."""
    args = _args(ev)
    resume = args.get("resume")
    if isinstance(resume, str) and resume and args.get("no_resume_opt") is True:
        return {
            "not_restored": ("optimizer", "amp_scaler"),
            "not_restored_why": f"args: resume={resume!r}, no_resume_opt=True",
        }
    return {}


def detect(ev: Evidence) -> list[str] | None:
    keys = {"state_dict", "epoch", "arch", "version"}
    if not keys <= ev.keys or not isinstance(ev.value("arch"), str):
        return None
    out = [f"state_dict + epoch + arch {ev.value('arch')!r} + version (timm CheckpointSaver)"]
    out += [f"{k} saved" for k in ("state_dict_ema", "amp_scaler", "saver") if k in ev.keys]
    return out


# The declaration every writer makes: alike in shape by design, the registry reads them all.
PROFILE = WriterProfile(
    name="timm",
    title="timm train.py (CheckpointSaver)",
    detect=detect,
    priority=40,
    parts={
        "model": ("state_dict",),
        "ema": ("state_dict_ema",),
        "optimizer": ("optimizer",),
        "scaler": ("amp_scaler",),
        "run": ("epoch", "args", "saver"),
    },
    counters=(Counter("epoch", "epochs", "the epoch just finished (resume starts at epoch + 1)"),),
    optimizer="saved",
    scheduler="rebuilt",
    scheduler_from="epoch",
    rng="not_saved",
    copies=(LAST,),
    save_name=SAVE_NAME,
    save_counter="epoch",
    facts=facts,
    notes="The LR scheduler is rebuilt from the epoch at resume; --no-resume-opt restores the "
    "weights only.",
)
