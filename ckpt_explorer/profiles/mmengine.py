"""OpenMMLab's mmengine ``Runner`` (``CheckpointHook``, ``Runner.save_checkpoint``).

An ``iter_<N>.pth`` / ``epoch_<N>.pth`` file holds ``meta`` (``epoch``, ``iter``, ``seed``,
``cfg``, ``mmengine_version`` ...), ``state_dict``, ``message_hub``, ``optimizer`` (the optim
wrapper's state) and ``param_schedulers`` (a list: one state per scheduler of the
``param_scheduler`` config). ``meta.iter`` counts ``train_step`` calls, i.e. micro-batches: with
``accumulative_counts = k`` the optimizer steps once every k iterations. No RNG state is saved:
``randomness.seed`` is recorded in ``meta.seed`` and re-applied at resume. The work dir's
``last_checkpoint`` text file names the newest save (``resume=True`` reads it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .spec import Counter, Evidence, WriterProfile

ACCUMULATIVE = re.compile(r"accumulative_counts\s*[=:]\s*(\d+)")
MAX_CFG = 1 << 20  # a config text longer than this is not searched


def facts(ev: Evidence) -> Mapping[str, Any]:
    """``accumulative_counts`` from the config text saved in ``meta.cfg`` (1, the optim
    wrapper's default, where the config does not set it)."""
    cfg = ev.value("meta.cfg")
    if not isinstance(cfg, str) or not cfg.strip() or len(cfg) > MAX_CFG:
        return {}  # a Runner built from objects, not from a config, records none
    found = ACCUMULATIVE.findall(cfg)
    if len(set(found)) > 1:
        return {}
    return {"accumulative_counts": int(found[0]) if found else 1}


def detect(ev: Evidence) -> list[str] | None:
    if "meta" not in ev.keys or "state_dict" not in ev.keys:
        return None
    version = ev.value("meta.mmengine_version") or ev.value("meta.mmengine")
    if version is None and "message_hub" not in ev.keys:
        return None
    out = ["meta + state_dict + message_hub (mmengine's save_checkpoint layout)"]
    if version is not None:
        out.append(f"meta.mmengine_version {version!s}")
    return out


# The declaration every writer makes: alike in shape by design, the registry reads them all.
PROFILE = WriterProfile(
    name="mmengine",
    title="mmengine Runner",
    detect=detect,
    priority=30,
    parts={
        "model": ("state_dict",),
        "optimizer": ("optimizer",),
        "scheduler": ("param_schedulers",),
        "run": ("meta", "message_hub"),
    },
    counters=(
        Counter("meta.iter", "micro_batches", "train_step calls (micro-batches)"),
        Counter("meta.epoch", "epochs", "epochs done"),
        Counter(
            "param_schedulers.0._global_step",
            "micro_batches",
            "the first scheduler's steps: one per train_step (iteration)",
        ),
    ),
    accumulation=("accumulative_counts",),
    optimizer="saved",
    scheduler="optional",
    rng="not_saved",
    pointers=("last_checkpoint",),
    save_name=r"^iter_(\d+)\.pth$",
    save_counter="meta.iter",
    facts=facts,
    notes="resume=True loads optimizer and param_schedulers; the seed, not an RNG state, "
    "is restored.",
)
