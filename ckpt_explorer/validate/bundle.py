"""Training-state bundles: every part present, and the steps/epochs they record agree.

Step claims come from the folder name (``epoch-E_step-S``, ``global_stepN``,
``checkpoint-N``), ``running_states.json``/``meta.pt``, DeepSpeed's ``global_steps``,
``trainer_state.json``, a one-file state's ``step``/``iter_num``, the optimizer's ``step`` and
the scheduler's ``last_epoch``. accelerate's ``random_states_N.pkl`` ``step`` (a gradient-
accumulation counter) and its ``checkpoint_<n>`` folder names (a save counter) are no claims.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..io.location import Location
from ..readers.json_files import optional_json
from ..readers.roles import (
    POSITION_KEYS,
)
from .findings import Finding
from .parts import Components

STEP_IN_NAME = re.compile(r"(?:^|[_\-])(?:global_step|step|checkpoint)[_\-]?(\d+)$")
EPOCH_IN_NAME = re.compile(r"(?:^|[_\-])epoch[_\-]?(\d+)(?:[_\-]|$)")
ACCELERATE_NAME = re.compile(r"checkpoint_\d+")


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def position_claims(path: Path | Location, parts: Components) -> dict[str, int]:
    """Where the run says it is: source -> step."""
    claims: dict[str, int] = {}
    m = STEP_IN_NAME.search(path.name)
    if m and not _accelerate_save_count(path, parts):
        claims[f"folder name {path.name}"] = int(m.group(1))
    for rs in parts.run_states:
        for key in POSITION_KEYS:
            if key == "step" and not rs.step_is_position:
                continue
            value = _int(rs.values.get(key))
            if value is not None:
                claims[f"{rs.label.rstrip('/.') or Path(rs.file).name} {key}"] = value
                break
    try:
        trainer = optional_json(path, "trainer_state.json") if path.is_dir() else None
    except Exception:
        trainer = None
    if isinstance(trainer, dict) and _int(trainer.get("global_step")) is not None:
        claims["trainer_state.json global_step"] = int(trainer["global_step"])
    return claims


def _accelerate_save_count(path: Path | Location, parts: Components) -> bool:
    """accelerate's automatic naming ``checkpoint_<n>`` counts saves, not steps."""
    accelerate = any(rs.traits.accelerate_rng for rs in parts.run_states)
    return accelerate and ACCELERATE_NAME.fullmatch(path.name) is not None


def _rng_expected(parts: Components) -> str:
    """Why the writer saves RNG beside the optimizer unless told not to ("" when it need not):
    the HF Trainer's ``rng_state.pth``, Megatron's ``rng_state`` (off with ``--no-save-rng``)."""
    trainer = any(rs.traits.trainer_state for rs in parts.run_states)
    if trainer and parts.optimizers:
        return " although the HF Trainer saves rng_state.pth with the optimizer"
    if "no_save_rng" in parts.args:  # Megatron's arguments
        if parts.args["no_save_rng"] is True:
            return " (the run was saved with --no-save-rng)"
        return " although Megatron saves rng_state unless --no-save-rng"
    return ""


def check_bundle(path: Path | Location, parts: Components) -> list[Finding]:
    out: list[Finding] = []
    if not parts.models:
        out.append(
            Finding(
                "bundle.missing_model",
                "error",
                "the training state holds no model weights",
                "Save the model beside the optimizer; a resume needs both.",
            )
        )
    only_model = parts.args.get("save_only_model") is True  # HF TrainingArguments
    if not parts.optimizers:
        out.append(
            Finding(
                "bundle.missing_optimizer",
                "info" if only_model else "warning",
                "the training state holds no optimizer state"
                + (" (the run was asked for save_only_model=True)" if only_model else ""),
                "A weights-only save by design: the Trainer cannot resume from it (set "
                "save_only_model=False for checkpoints to resume from)."
                if only_model
                else "Resuming rebuilds the optimizer with zero moments and step 0 (a loss jump "
                "after resume); save the optimizer too.",
            )
        )
    used_scheduler = any("initial_lr" in g for o in parts.optimizers for g in o.groups)
    by_design = any(rs.traits.scheduler_from_position for rs in parts.run_states)
    if not parts.schedulers and by_design:
        out.append(
            Finding(
                "bundle.missing_scheduler",
                "info",
                "no LR scheduler state is saved: the recipe rebuilds it from the run position "
                "at resume (torchtune)",
                "By design; a resume with another dataset size or max_steps_per_epoch moves "
                "the schedule.",
            )
        )
    elif not parts.schedulers:
        out.append(
            Finding(
                "bundle.missing_scheduler",
                "warning" if used_scheduler and not only_model else "info",
                "no LR scheduler state is saved"
                + (" although the optimizer groups carry initial_lr" if used_scheduler else ""),
                "A rebuilt scheduler restarts its warm-up/decay; save lr_scheduler with the "
                "checkpoint.",
            )
        )
    saved = [rs for rs in parts.run_states if rs.values or rs.has_rng]
    if not saved:
        # model and optimizer alone, trained without a scheduler (ColossalAI's booster saves
        # just those; the loop saves the rest): a choice; beside a scheduler saved or used
        # (initial_lr in the groups), or the Trainer's arguments, the run position was lost
        minimal = not (parts.schedulers or used_scheduler or parts.args)
        out.append(
            Finding(
                "bundle.missing_run_state",
                "info" if minimal else "warning",
                "no RNG/meta file or running_states.json is saved"
                + (" (nor an LR scheduler: model and optimizer only)" if minimal else ""),
                "The data position and RNG restart on resume; save epoch/step/sample index "
                "(running_states.json or meta.pt) and the RNG states.",
            )
        )
    elif not any(rs.has_rng for rs in saved):
        expected = _rng_expected(parts)
        out.append(
            Finding(
                "bundle.missing_rng",
                "warning" if expected else "info",
                "the run position is saved but no RNG state" + expected,
                "Dropout and data shuffling will not replay exactly after resume"
                + ("; copy rng_state*.pth from the run." if "rng_state.pth" in expected else "."),
            )
        )
    claims = position_claims(path, parts)
    if len(set(claims.values())) > 1:
        shown = ", ".join(f"{k} = {v}" for k, v in claims.items())
        out.append(
            Finding(
                "bundle.step_mismatch",
                "error",
                f"the parts disagree on the step: {shown}",
                "They were saved at different steps or copied together from different "
                "checkpoints; resume from a consistent set.",
            )
        )
    out += _epoch(path, parts)
    return out


def _epoch(path: Path | Location, parts: Components) -> list[Finding]:
    m = EPOCH_IN_NAME.search(path.name)
    if m is None:
        return []
    folder_epoch = int(m.group(1))
    out = []
    for rs in parts.run_states:
        epoch = _int(rs.values.get("epoch"))
        if epoch is not None and epoch != folder_epoch:
            out.append(
                Finding(
                    "bundle.epoch_mismatch",
                    "error",
                    f"the folder name says epoch {folder_epoch} but "
                    f"{rs.label.rstrip('/') or 'the run state'} says epoch {epoch}",
                    "The run state was copied from another checkpoint.",
                )
            )
    return out
