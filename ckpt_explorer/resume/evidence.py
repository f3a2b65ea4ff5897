"""Evidence helpers for the resume doctor: per-side facts, zero moments, the tensor diff."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..readers.roles import MOMENTS
from ..validate.numeric import tensor_stats
from ..validate.parts import Components, OptimizerPart
from ..view import CheckpointView

if TYPE_CHECKING:
    from ..contracts import ProgressFn
    from ..diff.rows import TensorDiff
    from .report import Cause


@dataclass
class Side:
    """What one training state says about itself."""

    view: CheckpointView
    parts: Components
    opt: OptimizerPart | None
    opt_step: float | None
    sched_step: int | None
    sched_values: dict[str, Any] | None
    position: int | None
    has_rng: bool
    has_run_state: bool
    not_from_a: str | None = None  # the doctor's lineage evidence ("": B descends from A)


def zero_moments(opt: OptimizerPart) -> tuple[int, int]:
    """(all-zero exp_avg tensors, exp_avg tensors) of an optimizer."""
    zeros = total = 0
    for states in opt.states.values():
        rec = states.get("exp_avg")
        if rec is None or not rec.numel:
            continue
        total += 1
        if tensor_stats(opt.view.load(rec.name)).all_zero:
            zeros += 1
    return zeros, total


def compare_tensors(
    va: CheckpointView,
    vb: CheckpointView,
    a: Side,
    b: Side,
    progress: ProgressFn | None = None,
) -> list[Cause]:
    """Causes found by diffing every tensor: dtype changes and weights that should not move."""
    from ..diff import diff_checkpoints
    from .report import Cause

    result = diff_checkpoints(va, vb, progress=progress)
    causes = []
    dtype = [r for r in result.tensors if r.dtype_a and r.dtype_b and r.dtype_a != r.dtype_b]
    if dtype:
        model_rows = [r for r in dtype if ".state." not in "." + r.name.split("/")[-1]]
        ev = [f"{r.name}: {r.dtype_a} → {r.dtype_b}" for r in dtype[:8]]
        if len(dtype) > 8:
            ev.append(f"… {len(dtype)} tensors in all")
        causes.append(
            Cause(
                "dtype_changed",
                "dtype changed between the two states",
                0.8 if model_rows else 0.6,
                tuple(ev),
                "Resume in the precision you trained in (mixed-precision config, "
                "torch_dtype on load, master weights).",
            )
        )
    # Weights should be equal only where both states are at the same point of the run: the same
    # run position when both record one (an optimizer restarted on resume can be back at A's
    # step while the run moved on), else the same optimizer and scheduler steps.
    if a.position is not None and b.position is not None:
        steps_equal = a.position == b.position
    else:
        steps_equal = (
            a.opt_step is not None and a.opt_step == b.opt_step and a.sched_step == b.sched_step
        )
    moved = [r for r in result.tensors if r.status == "changed"]
    weights = [r for r in moved if _state(r) is None]
    restarted = _counters_restarted(result.tensors, a) if steps_equal and weights else None
    if restarted is not None:
        causes.append(restarted)
    elif steps_equal and weights:
        weights.sort(key=lambda r: -(r.rel_l2 or 0.0))
        ev = [f"{r.name}: rel_l2 {r.rel_l2:.3g}, max |Δ| {r.max_abs:.3g}" for r in weights[:8]]
        ev.insert(
            0, f"both states are at optimizer step {a.opt_step:g} yet {len(weights)} tensors differ"
        )
        causes.append(
            Cause(
                "weights_changed_unexpectedly",
                "weights differ where they should be equal (same step)",
                0.75,
                tuple(ev),
                "The weights were not loaded (or loaded from another checkpoint) on resume, "
                "or a non-deterministic op ran; diff the model parts to see where.",
            )
        )
    side_parts = _run_state_parts(va) | _run_state_parts(vb)
    missing = [
        r
        for r in result.tensors
        if r.status in ("only_in_a", "only_in_b") and r.name.split("/", 1)[0] not in side_parts
    ]
    if missing:
        ev = [f"{r.name}: {r.status.replace('_', ' ')}" for r in missing[:8]]
        causes.append(
            Cause(
                "tensors_missing",
                "tensors present on one side only",
                0.5,
                tuple(ev),
                "A part of the state was not saved or not loaded on one side.",
            )
        )
    return causes


# Model weights this close to A's (relative L2 over all of them) descend from A's; two
# independent initialisations sit near sqrt(2).
DESCENDS_FROM = 0.5


def _state(row: TensorDiff) -> str | None:
    """The optimizer state a row holds (``exp_avg``...: the view's slot of its name, also
    under a key of a one-file training state, ``optimizer_states.0.state.3.exp_avg``); None
    for weights."""
    return row.state


def _counters_restarted(rows: list[TensorDiff], a: Side) -> Cause | None:
    """B's step counters equal A's, yet its weights moved on from A's (a little: B descends
    from A) and its optimizer moments differ: B loaded A's weights alone and counted its steps
    from 0 again (Lightning's ``load_from_checkpoint`` then ``fit`` without ``ckpt_path``, a
    ``model.load_state_dict`` before a fresh loop). None when that is not what the rows show."""
    from .report import Cause

    model = [
        r
        for r in rows
        if _state(r) is None and r.norm_a and r.diff_l2 is not None and _is_weight(r)
    ]
    moments = [r for r in rows if _state(r) in MOMENTS and r.status == "changed"]
    if not model or not moments or not a.opt_step:
        return None
    diff = math.sqrt(sum((r.diff_l2 or 0.0) ** 2 for r in model))
    norm = math.sqrt(sum((r.norm_a or 0.0) ** 2 for r in model))
    if not 0.0 < diff / norm < DESCENDS_FROM:
        return None
    return Cause(
        "optimizer_moments_reset",
        "optimizer moments reset (optimizer state not restored)",
        0.88,
        (
            f"both states are at optimizer step {a.opt_step:g}, yet B's weights moved on from "
            f"A's (relative L2 {diff / norm:.3g} over the model) and {len(moments)} moment "
            "tensors differ",
            "B's counters started again from 0 after loading A's weights alone: optimizer, "
            "LR scheduler and step counter were not restored",
        ),
        "Resume the whole training state (Lightning: trainer.fit(model, ckpt_path=...); "
        "optimizer.load_state_dict and scheduler.load_state_dict in a plain loop), not the "
        "weights alone.",
    )


# BatchNorm statistics and counters are buffers, not weights: they follow the data seen, not
# the optimizer (a restart counts num_batches_tracked from 0 again)
BUFFERS = ("num_batches_tracked", "running_mean", "running_var")


def _is_weight(row: TensorDiff) -> bool:
    dtype = row.dtype_a or ""
    return dtype.startswith(("float", "bfloat")) and not row.name.endswith(BUFFERS)


def _run_state_parts(view: CheckpointView) -> set[str]:
    """Parts holding RNG / run state / arguments: their tensors are the RNG cause's evidence."""
    return {n for n, p in view.parts.items() if p.kind in ("rng", "running_state", "args")}
