"""A checkpoint saved as one file per part (``model_N.pt``, ``ema_N.pt``, ``optim_N.pt``): one
summary from its parts' own summaries, each part's role read from its content.

A part's tensors are named ``<label><name>`` (``model/blocks.0.weight``, ``optim/state.0.exp_avg``)
with the label of its series (:func:`.discover.group_parts`), so the pass diffs model with
model, EMA with EMA and optimizer with optimizer. A model-only part is an EMA copy when its
content says so (``torch.optim.swa_utils.AveragedModel``'s ``n_averaged``) or its name does
(``ema``, ``swa``, ``avg``); its tensors are kept (NaN/Inf) but are not the model's weights.
Two model parts neither of which is marked so are both reported as model: which one trains
cannot be told from the files.
"""

from __future__ import annotations

from pathlib import Path

from ..view import CheckpointView
from .discover import Candidate
from .facts import Part, is_ema_copy, recorded_step, summarize_view
from .summaries import CheckpointSummary

ORDER = ("model", "optimizer", "scheduler", "rng", "run_state")
EMA = "EMA of the model"


def _roles(subs: list[tuple[str, CheckpointView, CheckpointSummary]]) -> dict[str, str]:
    """label -> what the part holds (``model``, ``EMA of the model``, ``optimizer``...)."""
    out = {}
    model_only = [label for label, _, s in subs if s.parts == ["model"]]
    for label, view, s in subs:
        if label in model_only and is_ema_copy(label, view):
            out[label] = EMA
        else:
            out[label] = ", ".join(s.parts) or "nothing recognised"
    models = [label for label in model_only if out[label] != EMA]
    for label in models if len(models) > 1 else []:
        out[label] = f"model (one of {len(models)} model files: which one trains is unknown)"
    return out


def summarize_parts(cand: Candidate, parts: list[Part], mtime: float) -> CheckpointSummary:
    """The summary of a checkpoint of parts (``cand.parts``, opened as ``parts``)."""
    subs = []
    for label, view, _ in parts:
        sub = Candidate(view.path.local_path() or Path(str(view.path)), cand.name_step, "file")
        subs.append((label, view, summarize_view(sub, view, mtime)))
    roles = _roles(subs)
    claims: dict[str, int] = {}
    for _, _, s in subs:
        claims.update(s.claims)
    step, source = recorded_step(claims)
    opt = next((s for _, _, s in subs if s.opt_step is not None), None)
    opt = opt or next((s for _, _, s in subs if s.groups), None)
    sched = next((s for _, _, s in subs if s.scheduler is not None), None)
    if step is None and opt is not None and opt.opt_step is not None:
        step, source = int(opt.opt_step), "optimizer step"
    if step is None:
        step, source = cand.name_step, "name"
    held = {r for label, _, s in subs if roles[label] != EMA for r in s.parts}
    summary = CheckpointSummary(
        path=str(cand.path),
        step=step,
        step_source=source,
        name_step=cand.name_step,
        claims=claims,
        mtime=mtime,
        family="+".join(dict.fromkeys(s.family for _, _, s in subs)),
        kind="parts",
        parts=[r for r in ORDER if r in held]
        + (["ema"] if EMA in roles.values() or "ema" in held else []),
        opt_step=opt.opt_step if opt is not None else None,
        sched_step=sched.sched_step if sched is not None else None,
        scheduler=sched.scheduler if sched is not None else None,
        groups=opt.groups if opt is not None else [],
        trainable=opt.trainable if opt is not None else None,
        has_rng=any(s.has_rng for _, _, s in subs),
        epoch=next((s.epoch for _, _, s in subs if s.epoch is not None), None),
        files={view.path.name: roles[label] for label, view, _ in subs},
        unrecognised=[u for _, _, s in subs for u in s.unrecognised],
    )
    for label, _, s in subs:
        for name, facts in s.tensors.items():
            if roles[label] == EMA:
                facts.role = "ema"
            summary.tensors[label + name] = facts
    return summary
