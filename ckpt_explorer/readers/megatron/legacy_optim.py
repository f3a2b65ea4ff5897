"""The logical optimizer of a legacy Megatron checkpoint: every tensor rank's states joined.

Each tensor-parallel rank's ``model_optim_rng.pt`` holds a torch optimizer over its own shards,
with the same ids on every rank (megatron-core builds the groups from the same modules). Its
ids are named against that rank's model order (:mod:`.legacy_rank`); where every
rank names every id alike, the states of an id are joined as its parameter is
(:func:`.megatron_tp.decide` on the states' shapes: ``exp_avg`` / ``exp_avg_sq`` are shaped
like the shard), and a scalar ``step`` is rank 0's. The result has the ids, groups and names
of rank 0's optimizer and full-shape states, as a dist checkpoint shows them.

Not joined (the per-rank optimizers stay in the ``mp_rank_TT`` parts): pipeline-parallel
states (one optimizer, one id space, per stage), ranks whose names disagree, the
DistributedOptimizer (flat buffers, no per-parameter states).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...io.location import Location
from ...types import Detection, TensorRecord
from ...view import CheckpointView
from .common import files_of
from .dist_optim import PADDING_NOTE
from .legacy_rank import DISTRIB_OPTIM, FLAT_NOTE
from .tp import decide, joined_record

FAMILY = "megatron-legacy"


def _rank_optimizers(views: list[CheckpointView]) -> list[CheckpointView] | None:
    opts = [v.parts.get("optimizer") for v in views]
    if any(o is None or o.optimizer is None or not o.optimizer.state_ids for o in opts):
        return None
    return [o for o in opts if o is not None]


def logical_optimizer(
    folder: Location, views: dict[str, CheckpointView], args: dict[str, Any]
) -> tuple[CheckpointView | None, str]:
    """The joined optimizer of the tensor ranks ``views`` (one pipeline stage), or None and
    why not."""
    opts = _rank_optimizers(list(views.values()))
    if opts is None:
        return None, ""
    infos = [o.optimizer for o in opts if o.optimizer is not None]
    first = infos[0]
    names = {pid: n for pid, n in first.names.items() if n.known}
    if len(names) < len(first.state_ids) or any(
        {p: n.name for p, n in i.names.items()} != {p: n.name for p, n in first.names.items()}
        for i in infos[1:]
    ):
        return None, (
            "optimizer states not joined across tensor ranks: not every id is named alike on "
            "every rank (see each mp_rank_TT part)"
        )
    by_name = [
        {r.name: replace(r, file=f"{where}/{r.file}") for r in o.tensors}
        for where, o in zip(views, opts, strict=True)
    ]
    records: list[TensorRecord] = []
    problems: list[str] = []
    for pid in first.state_ids:
        param = names[pid].name or ""
        for state in first.state_names.get(pid, ()):
            key = f"state.{pid}.{state}"
            recs = [m.get(key) for m in by_name]
            if any(r is None for r in recs):
                problems.append(f"{key}: not on every rank")
                continue
            present = [r for r in recs if r is not None]
            if not present[0].shape:  # a scalar: the step
                records.append(present[0])
                continue
            rule, problem = decide(param, [tuple(r.shape) for r in present], args)
            if problem:
                problems.append(f"{key} ({param}): {problem}")
            records.append(joined_record(present, rule))
    info = replace(first, name_source=f"{first.name_source}, the same on every tensor rank")
    evidence = [
        f"the optimizers of {len(opts)} tensor rank(s) ({', '.join(views)}), ids named alike on "
        "each, states joined as their parameters (the model part's rules)"
    ]
    view = CheckpointView(
        folder,
        Detection(
            str(folder), FAMILY, "optimizer", tuple(evidence), "Megatron optimizer, ranks joined"
        ),
        files_of(records),
        tuple(records),
        {"param_groups": list(first.param_groups)},
        optimizer=info,
        warnings=tuple(problems[:20]),
    )
    return view, ""


def flat_optimizer(folder: Location, views: dict[str, CheckpointView]) -> CheckpointView | None:
    """The DistributedOptimizer of every rank: each rank's ``distrib_optim.pt`` buffers
    (``mp_rank_TT.<buffer>``) with rank 0's param groups; no ids (not recorded)."""
    opts = {where: v.parts.get("optimizer") for where, v in views.items()}
    if not opts or any(o is None or o.path.name != DISTRIB_OPTIM for o in opts.values()):
        return None
    records: list[TensorRecord] = []
    for where, o in opts.items():
        assert o is not None
        records += [
            replace(r, name=f"{where}.{r.name}", file=f"{where}/{r.file}") for r in o.tensors
        ]
    first = next(iter(opts.values()))
    assert first is not None and first.optimizer is not None
    groups = list(first.optimizer.param_groups)
    evidence = (
        f"{DISTRIB_OPTIM} of {len(opts)} rank(s): flat param / exp_avg / exp_avg_sq buffers",
        f"{len(groups)} param group(s) (with step) from {next(iter(opts))}'s model_optim_rng.pt",
        FLAT_NOTE,
        PADDING_NOTE,
    )
    return CheckpointView(
        folder,
        Detection(
            str(folder),
            FAMILY,
            "optimizer",
            evidence,
            "Megatron DistributedOptimizer flat buffers (distrib_optim.pt of every rank)",
        ),
        files_of(records),
        tuple(records),
        {"param_groups": groups},
        optimizer=first.optimizer,
    )
