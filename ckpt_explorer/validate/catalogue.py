"""The rule catalogue: every rule id that validate, the security gate and the loader checks
emit, registered once with its area, the severities it may take and one line of docs.

A rule id is ``<area>.<what>``; its area is the part of validate that runs it (``tied.*`` rules
run with ``config``). README's rule table is generated from here (``scripts/rules_table.py``),
and ``tests/validate/test_rule_catalogue.py`` fails on an id emitted anywhere in the package
that is not catalogued, and on a catalogued id that nothing emits.

To add a rule to an area whose rules are listed here: emit it in its area's module and add one
:func:`rule` line here. To add an area: one module in ``validate/`` declaring
``AREA = Area(...)`` (its rules, its steps, the area it sits after; ``validate/tokenizer.py``
is the example) and its name in :data:`AREA_MODULES`; :func:`register_area` places its rules
here, its name in :data:`AREAS` and its steps in the runner's step tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib import import_module
from typing import TypeVar

from .area import ERR, INFO, WARN, Area, Rule, Step, declare

T = TypeVar("T")

# the areas whose rules are listed below and whose steps validate/runner.py lists, in the order a
# report lists them as checked (an area is checked when one of its steps applied); a registered
# area is placed after the area it names
AREAS: tuple[str, ...] = ("security", "integrity", "loadable", "quantized", "config")
AREAS += ("optimizer", "scheduler", "numeric", "bundle")
RULES: dict[str, Rule] = {}
REGISTERED: dict[str, Area] = {}


def rule(id: str, severities: str | tuple[str, ...], doc: str) -> Rule:
    """Register rule ``id`` (its area from its prefix); an id registered twice raises."""
    if id in RULES:
        raise ValueError(f"rule {id} registered twice")
    r = RULES[id] = declare(id, severities, doc)
    return r


# One rule() line per rule id, alike in shape by design: these lines are the catalogue.
# -- security: the gate's verdict of every file (security/judge.py, security/scan.py) ------------
rule("security.code_execution", ERR, "a plain load of the file runs code (the verdict unsafe)")
rule("security.ships_code", ERR, "the file is code a consumer imports or runs (the verdict code)")
rule("security.unverified", ERR, "a pickle the gate could not prove inert (the verdict unverified)")
rule("security.weights_only_refused", (ERR, INFO), "torch.load(weights_only=True) refuses the file")
rule("security.container", INFO, "a container (zip, tar, compressed stream) judged by its members")
# -- integrity: files, indexes and shards ------------------------------------------------------
rule("integrity.missing_file", ERR, "a file the index or the format names is not there")
rule("integrity.missing_tensor", ERR, "a tensor the index names is not in its shard")
rule("integrity.unindexed_tensor", WARN, "a shard holds a tensor the index does not name")
rule("integrity.wrong_shard", ERR, "the index names a shard that does not hold the tensor")
rule("integrity.orphan_shard", WARN, "a shard no index entry names")
rule("integrity.duplicate_entry", WARN, "the index lists a tensor twice")
rule("integrity.duplicate_tensor", (WARN, INFO), "two shards hold a tensor of the same name")
rule("integrity.shadowing_file", WARN, "a file beside the index that a loader reads instead of it")
rule("integrity.bad_index", ERR, "the index is not valid JSON or lacks its weight map")
rule("integrity.total_size", (ERR, WARN), "total_size matches the tensors in no known unit")
rule("integrity.total_size_convention", INFO, "total_size counts MiB or bytes, and which")
rule("integrity.tmp_index_files", WARN, "tmp_index_files/ left by an interrupted sharded save")
rule("integrity.interrupted_save", ERR, "a save that was cut off: temporary files, no index")
rule("integrity.truncated", ERR, "a file shorter than its header or index says")
rule("integrity.unreadable_file", ERR, "a file of the checkpoint cannot be read")
rule("integrity.unreadable_part", ERR, "a checkpoint file beside a training state cannot be read")
rule("integrity.unsafe_name", ERR, "a name in an index that would leave the folder")
rule("integrity.unopenable", ERR, "the checkpoint cannot be opened (after an error found)")
# -- quantized: a quantized export's quantization_config against its stored parts ----------------
rule("quantized.parts_disagree", ERR, "a quantized weight's parts do not fit the config's scheme")
rule("quantized.ignored_but_quantized", WARN, "a module the config ignores is stored quantized")
rule("quantized.target_not_quantized", WARN, "a module the config targets is stored in float")
# -- loadable: each real loader's own resolution of the files ---------------------------------
rule("loadable.fails", (ERR, INFO), "a loader the checkpoint is meant for cannot load it")
rule("loadable.damaged", ERR, "a file every loader reads is damaged")
rule("loadable.conflict", WARN, "two loaders would read different weights (a stale copy)")
# -- config: config.json against the tensors, and tied embeddings -----------------------------
rule("config.vocab_size", ERR, "the embedding rows disagree with config vocab_size")
rule("config.vocab_padding", ERR, "the embedding is padded past vocab_size in a way no loader fits")
rule("config.missing_layers", ERR, "the config names layers the tensors lack")
rule("config.extra_layers", ERR, "the tensors hold layers beyond the config's count")
rule("config.hidden_size", ERR, "tensor widths disagree with config hidden_size")
rule("config.dtype", WARN, "the config's torch_dtype is not the dtype of most bytes")
rule("tied.lm_head_missing", ERR, "no lm_head and tie_word_embeddings is false")
rule("tied.lm_head_differs", ERR, "tied embeddings saved with a differing lm_head")
rule("tied.untied_but_equal", INFO, "an untied lm_head equal to the embedding")
# -- optimizer: groups, ids, states against the model -----------------------------------------
rule("optimizer.no_param_groups", ERR, "an optimizer state without param_groups")
rule("optimizer.group_params", ERR, "a param group without its params list")
rule("optimizer.duplicate_id", ERR, "a param id listed in two groups")
rule("optimizer.id_gaps", WARN, "param ids with gaps (a group or parameters dropped)")
rule("optimizer.object_ids", INFO, "param ids are Python object ids (an old save)")
rule("optimizer.orphan_state", ERR, "state for a param id no group lists")
rule("optimizer.no_state", INFO, "an optimizer that has not stepped yet (no state)")
rule("optimizer.param_count", INFO, "the optimizer holds fewer tensors than the model has")
rule("optimizer.state_shape", ERR, "a state's shape fits no parameter (another param order)")
rule("optimizer.step_mismatch", WARN, "the parameters' step counters disagree")
rule("optimizer.negative_exp_avg_sq", ERR, "a second moment below zero")
rule("optimizer.bad_lr", ERR, "a group's lr is not a finite non-negative number")
rule("optimizer.hyperparameters", WARN, "hyperparameters the optimizer class does not keep")
rule("optimizer.group_keys", (WARN, INFO), "a group has keys other groups lack")
rule("optimizer.group_values", INFO, "groups set different values of one hyperparameter")
rule("optimizer.late_group", INFO, "a group added later with add_param_group")
rule("optimizer.initial_lr_missing", ERR, "a scheduler's base_lrs but no initial_lr in a group")
rule("optimizer.restart_unknown", INFO, "an optimizer without a step counter: a restart is unseen")
# -- scheduler: against its optimizer -------------------------------------------------------------
rule("scheduler.step_count", (WARN, INFO), "the scheduler's step counters disagree")
rule("scheduler.last_lr", WARN, "_last_lr disagrees with the optimizer's lr")
rule("scheduler.base_lrs", WARN, "base_lrs disagree with the groups' initial_lr")
rule("scheduler.group_count", ERR, "the scheduler has another number of groups than its optimizer")
rule("scheduler.optimizer_step", WARN, "the scheduler's steps and the optimizer's step disagree")
rule("scheduler.per_process_steps", INFO, "accelerate steps the scheduler once per process")
# -- numeric: every floating-point tensor streamed -----------------------------------------------
rule("numeric.nonfinite", ERR, "NaN or Inf in a tensor")
rule("numeric.nonfinite_run_state", INFO, "NaN or Inf in run bookkeeping (a best metric)")
rule("numeric.all_zero", WARN, "a weight matrix that is all zero")
rule("numeric.extreme", WARN, "values beyond what training leaves in a weight")
rule("numeric.negative_running_var", ERR, "a BatchNorm running_var below zero")
rule("numeric.norm_statistic_range", INFO, "a norm statistic outside a weight's usual range")
rule("numeric.not_judged", INFO, "flat buffers with uninitialised padding, not scanned")
# -- bundle: the parts of a training state and their counters ---------------------------------
rule("bundle.missing_model", ERR, "a training state without model weights")
rule("bundle.missing_optimizer", (WARN, INFO), "a training state without an optimizer state")
rule("bundle.missing_scheduler", (WARN, INFO), "a training state without a scheduler state")
rule("bundle.missing_rng", (WARN, INFO), "a training state without RNG states")
rule("bundle.missing_run_state", (WARN, INFO), "a training state without its run position")
rule("bundle.step_mismatch", ERR, "the parts record different steps")
rule("bundle.epoch_mismatch", ERR, "the parts record different epochs")
rule("bundle.optimizer_step", (ERR, WARN, INFO), "the optimizer's step against the run position")
rule("bundle.scheduler_step", WARN, "the scheduler's steps against the run position")
rule("bundle.stale_copy", WARN, "a copy (last.ckpt) older than the newest save beside it")
rule("bundle.stale_pointer", WARN, "a pointer file (latest) naming an older save")


def rules(area: str | None = None) -> list[Rule]:
    """The catalogue, in registration order (one area's rules with ``area``)."""
    return [r for r in RULES.values() if area is None or r.area == area]


def _placed(
    items: Sequence[T], new: Sequence[T], area_of: Callable[[T], str], after: str
) -> list[T]:
    """``items`` with ``new`` after the last item of area ``after`` (at the end without one)."""
    at = max((i + 1 for i, x in enumerate(items) if area_of(x) == after), default=len(items))
    return [*items[:at], *new, *items[at:]]


def _area_of(item: Rule | Step) -> str:
    return item.area


def register_area(area: Area) -> Area:
    """Register ``area``: its rules after those of the area it sits after, its name after that
    area's in :data:`AREAS`, its steps placed by :func:`with_steps`. Raises on a name or rule id
    registered twice, an unknown ``after``, a rule or step of another area."""
    global AREAS
    if area.name in AREAS:
        raise ValueError(f"area {area.name} registered twice")
    if area.after not in AREAS:
        raise ValueError(f"area {area.name} sits after {area.after}, which is no area")
    for r in area.rules:
        if r.id in RULES:
            raise ValueError(f"rule {r.id} registered twice")
    stray = [x.id for x in area.rules if x.area != area.name]
    stray += [repr(s.run) for s in area.steps if s.area != area.name]
    if stray:
        raise ValueError(f"area {area.name} declares rules or steps of another area: {stray}")
    placed = _placed(list(RULES.values()), area.rules, _area_of, area.after)
    RULES.clear()
    RULES.update((r.id, r) for r in placed)
    AREAS = tuple(_placed(AREAS, (area.name,), str, area.after))
    REGISTERED[area.name] = area
    return area


def with_steps(steps: tuple[Step, ...], *, before_view: bool) -> tuple[Step, ...]:
    """``steps`` (one phase's steps of the areas listed here) with the registered areas' steps
    of that phase, each area's after the last step of the area it sits after."""
    out = list(steps)
    for area in REGISTERED.values():
        own = [s for s in area.steps if s.before_view == before_view]
        out = _placed(out, own, _area_of, area.after)
    return tuple(out)


# The areas declared in a module of their own (validate/<name>.py defining AREA), one per line.
AREA_MODULES: tuple[str, ...] = (
    "tokenizer",
    "hf_load",
)
for _name in AREA_MODULES:
    register_area(import_module(f"{__package__}.{_name}").AREA)
