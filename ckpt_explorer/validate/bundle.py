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

from ..io.location import Location, as_location
from ..readers.json_files import optional_json
from ..readers.roles import (
    POSITION_KEYS,
)
from .findings import Finding
from .parts import Components

STEP_IN_NAME = re.compile(r"(?:^|[_\-])(?:global_step|step|checkpoint)[_\-]?(\d+)$")
EPOCH_IN_NAME = re.compile(r"(?:^|[_\-])epoch[_\-]?(\d+)(?:[_\-]|$)")
ACCELERATE_NAME = re.compile(r"checkpoint_\d+")
ACCUMULATION_KEYS = (
    "gradient_accumulation_steps",
    "grad_accum_steps",
    "grad_accum",
    "accum_iter",
    "accumulate_grad_batches",
)


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def position_claims(path: Path | Location, parts: Components) -> dict[str, int]:
    """Where the run says it is, in optimizer steps where the writer profile says what its
    counters count: source -> step. A counter the profile says counts epochs, samples or saves
    is no claim; one counting micro-batches is divided by the recorded accumulation factor
    (no claim when none is recorded)."""
    claims: dict[str, int] = {}
    profile = parts.writer.profile
    m = STEP_IN_NAME.search(path.name)
    if m and not _accelerate_save_count(path, parts) and _named_step_counts(path, parts):
        claims[f"folder name {path.name}"] = int(m.group(1))
    taken: set[str] = set()
    for rs in parts.run_states:
        for key in POSITION_KEYS:
            if key == "step" and not rs.step_is_position:
                continue
            value = _in_optimizer_steps(parts, key, _int(rs.values.get(key)))
            if value is not None:
                claims[f"{rs.label.rstrip('/.') or Path(rs.file).name} {key}"] = value
                taken.add(key)
                break
    try:
        trainer = optional_json(path, "trainer_state.json") if path.is_dir() else None
    except Exception:
        trainer = None
    if isinstance(trainer, dict) and _int(trainer.get("global_step")) is not None:
        claims["trainer_state.json global_step"] = int(trainer["global_step"])
        taken.add("global_step")
    for c in profile.counters:  # the writer's own counters the readers do not list as run state
        key = c.key.rsplit(".", 1)[-1].rsplit("/", 1)[-1]
        if key in taken:
            continue
        found = _converted(parts, c.key, _int(parts.writer.evidence.value(c.key)))
        if found is not None:
            claims[c.key.replace("/", " ") + found[1]] = found[0]
            taken.add(key)
    return claims


def _named_step_counts(path: Path | Location, parts: Components) -> bool:
    """The step in the save's name is an optimizer step (always, where the profile does not
    say what its save names carry)."""
    profile = parts.writer.profile
    if not profile.save_name or not re.search(profile.save_name, path.name):
        return True
    return profile.unit(profile.save_counter) in (None, "optimizer_steps")


def _in_optimizer_steps(parts: Components, key: str, value: int | None) -> int | None:
    """``value`` of counter ``key`` in optimizer steps, as the writer profile says it counts;
    None when it counts something else or cannot be converted."""
    converted = _converted(parts, key, value)
    return converted[0] if converted else None


def _converted(parts: Components, key: str, value: int | None) -> tuple[int, str] | None:
    """(value in optimizer steps, how it was converted: "" or " (8 ÷ accumulative_counts 2)")."""
    if value is None:
        return None
    unit = parts.writer.profile.unit(key)
    if unit in (None, "optimizer_steps"):
        return value, ""
    if unit == "micro_batches":
        factor = accumulation(parts)
        if factor is not None and value % factor[0] == 0:
            if factor[0] == 1:
                return value, ""
            return value // factor[0], f" ({value} micro-batches ÷ {factor[1]} {factor[0]})"
    return None


def accumulation(parts: Components) -> tuple[int, str] | None:
    """The gradient-accumulation factor the run records (micro-batches per optimizer step),
    under one of the profile's keys or a common name, with the key it was read from."""
    keys = parts.writer.profile.accumulation + ACCUMULATION_KEYS
    values = [v for rs in parts.run_states for v in rs.values.items()]
    values += list(parts.args.items()) + list(parts.writer.facts().items())
    for key, v in values:
        named = any(key == k or key.endswith(("." + k, "/" + k)) for k in keys)
        if named and isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v, key
    return None


def claims_certain(parts: Components, claims: dict[str, int]) -> bool:
    """Every claim is known to count optimizer steps: the writer is known and its profile says
    so for each claim's counter (a folder name carries the profile's save counter)."""
    profile = parts.writer.profile
    if not profile.known or not claims:
        return False
    for label in claims:
        if label.startswith("folder name "):
            if profile.counter(profile.save_counter) is None:
                return False
        elif not any(profile.counter(word) for word in label.split()):
            return False
    return True


def _accelerate_save_count(path: Path | Location, parts: Components) -> bool:
    """accelerate's automatic naming ``checkpoint_<n>`` counts saves, not steps."""
    accelerate = any(rs.traits.accelerate_rng for rs in parts.run_states)
    return accelerate and ACCELERATE_NAME.fullmatch(path.name) is not None


def _rng_expected(parts: Components) -> str:
    """Why the writer saves RNG beside the optimizer unless told not to ("" when it need not,
    or when the writer is not known): its profile (the HF Trainer's ``rng_state.pth``), or
    Megatron's arguments (``rng_state`` unless ``--no-save-rng``)."""
    profile = parts.writer.profile
    if profile.rng == "saved" and parts.optimizers:
        where = " or ".join(profile.parts.get("rng", ())) or "RNG states"
        return f" although the {profile.title} saves {where} with the optimizer"
    if "no_save_rng" in parts.args:  # Megatron's arguments
        if parts.args["no_save_rng"] is True:
            return " (the run was saved with --no-save-rng)"
        return " although Megatron saves rng_state unless --no-save-rng"
    return ""


def _rng_by_design(parts: Components, position: list[str]) -> Finding:
    """The run position is saved in the writer's own keys; RNG as its profile says."""
    profile = parts.writer.profile
    if profile.rng == "not_saved":
        return Finding(
            "bundle.missing_rng",
            "info",
            f"no RNG state: the {profile.title} does not save one (the run position is in "
            f"{', '.join(position[:2])})",
            "By design: resuming re-seeds; dropout and shuffling do not replay bit for bit.",
        )
    expected = _rng_expected(parts)
    return Finding(
        "bundle.missing_rng",
        "warning" if expected else "info",
        "the run position is saved but no RNG state" + expected,
        "Dropout and data shuffling will not replay exactly after resume.",
    )


def _missing_scheduler(parts: Components, used: bool, only_model: bool) -> Finding:
    """No scheduler state: by design for a writer that rebuilds it (torchtune, timm), a
    warning only where the writer is known to save one and the optimizer shows one was used,
    'cannot tell' otherwise."""
    profile = parts.writer.profile
    trait = any(rs.traits.scheduler_from_position for rs in parts.run_states)
    if profile.scheduler == "rebuilt" or trait:
        source = profile.scheduler_from or "the run position"
        who = profile.title if profile.known else "the recipe"
        return Finding(
            "bundle.missing_scheduler",
            "info",
            f"no LR scheduler state is saved: {who} rebuilds it from {source} at resume"
            + (" (torchtune)" if trait and not profile.known else ""),
            "By design; a resume with another dataset size or schedule length moves the schedule.",
        )
    used_text = " although the optimizer groups carry initial_lr" if used else ""
    if profile.scheduler == "saved" and used and not only_model:
        return Finding(
            "bundle.missing_scheduler",
            "warning",
            f"no LR scheduler state is saved{used_text}, and the {profile.title} saves it "
            f"({', '.join(profile.parts.get('scheduler', ())) or 'with the optimizer'})",
            "The scheduler state was lost or never registered with the writer: a resume "
            "rebuilds the scheduler and restarts its warm-up/decay. " + profile.notes,
        )
    cannot_tell = used and not only_model and profile.scheduler != "never"
    why = (
        f"the {profile.title} saves one only where the loop does"
        if profile.known
        else "no writer profile matches"
    )
    return Finding(
        "bundle.missing_scheduler",
        "info",
        "no LR scheduler state is saved"
        + used_text
        + (f": cannot tell whether this loop rebuilds it ({why})" if cannot_tell else ""),
        "A rebuilt scheduler restarts its warm-up/decay unless the training code rebuilds it "
        "at the run position; save lr_scheduler with the checkpoint.",
    )


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
    keys = parts.writer.evidence.keys
    own_scheduler = any(k in keys for k in parts.writer.profile.parts.get("scheduler", ()))
    if not parts.schedulers and not own_scheduler:  # (saved under the writer's own key)
        out.append(_missing_scheduler(parts, used_scheduler, only_model))
    saved = [rs for rs in parts.run_states if rs.values or rs.has_rng]
    profile = parts.writer.profile
    own_position = [c.key for c in profile.counters if parts.writer.evidence.has(c.key)]
    if not saved and own_position:
        # the writer keeps its run position where the readers list no run state (mmengine's
        # meta.iter, detectron2's iteration): saved; RNG as the writer treats it
        if profile.rng in ("saved", "optional", "not_saved", "rebuilt"):
            out.append(_rng_by_design(parts, own_position))
    elif not saved:
        # model and optimizer alone, trained without a scheduler (ColossalAI's booster saves
        # just those; the loop saves the rest): a choice; beside a scheduler saved or used
        # (initial_lr in the groups), or the Trainer's arguments, the run position was lost.
        # Alike in shape with missing_optimizer above (info when the save meant it), not logic.
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
    elif not any(rs.has_rng for rs in saved) and profile.rng == "not_saved":
        out.append(_rng_by_design(parts, [k for k in (c.key for c in profile.counters)]))
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
    behind = _scheduler_behind_position(claims)
    if behind is not None:
        out.append(behind)
    elif len(set(claims.values())) > 1:
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
    out += _stale_pointers(path, parts)
    return out


def _scheduler_behind_position(claims: dict[str, int]) -> Finding | None:
    """The one scheduler counter among the run-position claims (mmengine's
    ``param_schedulers.N._global_step``) behind every other claim, which agree: the scheduler
    was not restored at the resume (it counted only the steps since), named as such."""
    sched = [k for k in claims if "scheduler" in k.lower()]
    others = {k: v for k, v in claims.items() if k not in sched}
    if len(sched) != 1 or not others or len(set(others.values())) != 1:
        return None
    position = next(iter(others.values()))
    if claims[sched[0]] >= position:
        return None
    shown = ", ".join(others)
    return Finding(
        "bundle.scheduler_step",
        "warning",
        f"the scheduler's counter {sched[0]} is {claims[sched[0]]} but the run position "
        f"{position} ({shown})",
        "The scheduler was not restored on resume (it counts only the steps since): load the "
        "scheduler state before training continues.",
    )


POINTER_BYTES = 4096  # a pointer file names one path


def _save_step(pattern: re.Pattern[str], name: str) -> int | None:
    m = pattern.search(name)
    return int(m.group(1)) if m else None


def _stale_pointers(path: Path | Location, parts: Components) -> list[Finding]:
    """The writer's ``last`` copy older than a save beside it, or its ``latest`` pointer
    naming a save older than this one: a resume from the copy or through the pointer goes
    back in the run (the profile says which files are copies and pointers)."""
    profile, ev = parts.writer.profile, parts.writer.evidence
    if not profile.save_name:
        return []
    pattern = re.compile(profile.save_name)
    own = _save_step(pattern, path.name)
    if own is None:
        own = _int(ev.value(profile.save_counter))
    if own is None:
        return []
    out = []
    if path.name in profile.copies:
        steps = [(s, n) for n in ev.siblings if (s := _save_step(pattern, n)) is not None]
        newest = max(steps, default=None)
        if newest is not None and newest[0] > own:
            out.append(
                Finding(
                    "bundle.stale_copy",
                    "warning",
                    f"{path.name} is the {profile.title}'s copy of its newest save, but it is "
                    f"at {profile.save_counter} {own} and {newest[1]} beside it is at "
                    f"{newest[0]}: the copy is stale",
                    f"A resume from {path.name} goes back {newest[0] - own} steps (the run "
                    f"stopped between writing {newest[1]} and its copy, or the copy was "
                    f"overwritten): resume from {newest[1]}.",
                    file=path.name,
                )
            )
    for pointer in profile.pointers:
        if pointer not in ev.siblings:
            continue
        try:
            pointed = as_location(path.parent / pointer)
            text = pointed.read_range(0, POINTER_BYTES).decode("utf-8", "replace")
        except (OSError, ValueError):
            continue
        named = text.strip().replace("\\", "/").rsplit("/", 1)[-1]
        step = _save_step(pattern, named)
        if named and named != path.name and step is not None and step < own:
            out.append(
                Finding(
                    "bundle.stale_pointer",
                    "warning",
                    f"{pointer} beside this save names {named} ({profile.save_counter} {step}), "
                    f"older than this save ({own})",
                    f"The {profile.title} resumes from what {pointer} names: a resume goes back "
                    f"{own - step} steps. Write this save's path into {pointer}.",
                    file=pointer,
                )
            )
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
