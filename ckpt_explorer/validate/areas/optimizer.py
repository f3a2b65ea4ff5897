"""The optimizer area: groups, ids and states against the model they train."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..area import ERR, INFO, WARN, Area, Step, declare

if TYPE_CHECKING:
    from ..findings import Finding
    from ..parts import Components, ModelPart, OptimizerPart
    from ..run import Run


def _optimizer(run: Run) -> list[Finding]:
    from ..optimizer import check_optimizer

    parts = run.parts
    the_model = _pick_model(parts)
    # torch schedulers (base_lrs) put initial_lr in the groups; DeepSpeed's WarmupLR & co. do not
    sets_initial_lr = any("base_lrs" in s.values for s in parts.schedulers)
    out: list[Finding] = []
    for opt in parts.optimizers:
        model = _model_of(opt, parts, the_model)
        out += check_optimizer(opt, model, sets_initial_lr, run.stats)
    return out


def _pick_model(parts: Components) -> ModelPart | None:
    ordered = [m for m in parts.models if m.ordered]
    candidates = ordered or parts.models
    return candidates[0] if candidates else None


def _model_of(opt: OptimizerPart, parts: Components, default: ModelPart | None) -> ModelPart | None:
    """The model ``opt`` trains: accelerate's optimizer_k.bin pairs with model_k."""
    from ...readers.part_pairing import paired

    own = paired(opt.label, [m.label for m in parts.models])
    return next((m for m in parts.models if m.label == own), default)


# registered by its line in catalogue.AREAS; the declare(...) lines are catalogue entries, alike
# in shape by design
AREA = Area(
    name="optimizer",
    rules=(
        declare("optimizer.no_param_groups", ERR, "an optimizer state without param_groups"),
        declare("optimizer.group_params", ERR, "a param group without its params list"),
        declare("optimizer.duplicate_id", ERR, "a param id listed in two groups"),
        declare("optimizer.id_gaps", WARN, "param ids with gaps (a group or parameters dropped)"),
        declare("optimizer.object_ids", INFO, "param ids are Python object ids (an old save)"),
        declare("optimizer.orphan_state", ERR, "state for a param id no group lists"),
        declare("optimizer.no_state", INFO, "an optimizer that has not stepped yet (no state)"),
        declare(
            "optimizer.param_count", INFO, "the optimizer holds fewer tensors than the model has"
        ),
        declare(
            "optimizer.state_shape", ERR, "a state's shape fits no parameter (another param order)"
        ),
        declare("optimizer.step_mismatch", WARN, "the parameters' step counters disagree"),
        declare("optimizer.negative_exp_avg_sq", ERR, "a second moment below zero"),
        declare("optimizer.bad_lr", ERR, "a group's lr is not a finite non-negative number"),
        declare(
            "optimizer.hyperparameters", WARN, "hyperparameters the optimizer class does not keep"
        ),
        declare("optimizer.group_keys", (WARN, INFO), "a group has keys other groups lack"),
        declare(
            "optimizer.group_values", INFO, "groups set different values of one hyperparameter"
        ),
        declare("optimizer.late_group", INFO, "a group added later with add_param_group"),
        declare(
            "optimizer.initial_lr_missing",
            ERR,
            "a scheduler's base_lrs but no initial_lr in a group",
        ),
        declare(
            "optimizer.restart_unknown",
            INFO,
            "an optimizer without a step counter: a restart is unseen",
        ),
    ),
    steps=(Step("optimizer", _optimizer),),
)
