"""Megatron-LM legacy checkpoints (``--ckpt-format torch``): one ``torch.save`` per rank.

``iter_NNNNNNN/mp_rank_TT[_PPP]/model_optim_rng.pt`` (tensor rank ``TT``, pipeline rank
``PPP`` when pipeline-parallel; ``distrib_optim.pt`` beside it with the DistributedOptimizer),
under a save dir with ``latest_checkpointed_iteration.txt``; opening the save dir opens the
folder it names. Read without megatron, each file by the allow-list unpickler.

The view's parts:

- ``model``: the logical model, every tensor-parallel shard put back together and the
  pipeline stages joined (:mod:`.tp`); the rule that decided each parameter is in the
  part's ``tp_merge`` value and summarised in its evidence;
- ``mp_rank_TT[_PPP]``: each rank's file as a one-file training state of kind ``rank_file``
  (:mod:`.legacy_rank`: its model shards, its optimizer with ids named against its own
  model order, RNG, scheduler, run position, args): per-file detail, whose content the
  logical parts hold joined, so its tensors are not listed a second time in the view;
- ``scheduler``, ``running_state``, ``args`` from rank 0's file (:mod:`.common`), and
  ``rng`` with every rank's RNG states (absent when rank 0 saved none).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from typing import Any

from ...io.location import Location
from ...io.paths import found_in, key_prefix
from ...types import Detection, FileInfo, TensorRecord
from ...view import CheckpointView, as_rank_file, prefixed
from ..torch_pickle import torch_structure
from .common import (
    arg,
    files_of,
    layout_line,
    namespace_fields,
    save_dir_line,
    state_parts,
    tracked_folder,
)
from .legacy_optim import flat_optimizer, logical_optimizer
from .legacy_rank import DISTRIB_OPTIM, FLAT_NOTE, model_keys, rank_view
from .tp import layer_counts, merge_tp, offset_layers

FAMILY = "megatron-legacy"
RANK_DIR = re.compile(r"^mp_rank_(\d{2,})((?:_\d{3,}){0,2})$")
RANK_FILE = "model_optim_rng.pt"
ROOT_KEYS = ("checkpoint_version", "iteration", "args")
Rank = tuple[int, int, int]  # tensor, pipeline, expert rank


def rank_files(folder: Location) -> dict[Rank, Location]:
    """``(tp, pp, ep)`` -> ``mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt`` of an iteration folder.

    Megatron-LM appends ``_PPP`` when pipeline-parallel and ``_EEE`` when expert-parallel, so
    a single suffix is the expert rank when the args say ``expert_model_parallel_size`` > 1
    and ``pipeline_model_parallel_size`` 1, else the pipeline rank."""
    found: dict[tuple[int, ...], Location] = {}
    for child in folder.iterdir():
        m = RANK_DIR.match(child.name)
        if m and (child / RANK_FILE).is_file():
            nums = (int(m.group(1)), *(int(x) for x in m.group(2).split("_")[1:]))
            found[nums] = child / RANK_FILE
    if not found:
        return {}
    as_ep = False
    if any(len(k) == 2 for k in found):
        args = namespace_fields(_root(found[min(found)]).get("args"))
        ep, pp = (
            arg(args, "expert_model_parallel_size") or 1,
            arg(args, "pipeline_model_parallel_size") or 1,
        )
        as_ep = ep > 1 and pp == 1
    out: dict[Rank, Location] = {}
    for k, path in found.items():
        if len(k) == 3:
            out[(k[0], k[1], k[2])] = path
        elif len(k) == 2:
            out[(k[0], 0, k[1]) if as_ep else (k[0], k[1], 0)] = path
        else:
            out[(k[0], 0, 0)] = path
    return dict(sorted(out.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][0])))


def _root(file: Location) -> dict[str, Any]:
    root = torch_structure(file).root
    return root if isinstance(root, dict) else {}


def legacy_folder(path: Location) -> tuple[Location, str | None] | None:
    """``(iteration folder, tracker text)``: ``path``, or the folder its tracker names."""
    candidates: list[tuple[Location, str | None]] = [(path, None)]
    found = tracked_folder(path)
    if found is not None:
        candidates.append(found)
    for folder, tracker in candidates:
        ranks = rank_files(folder) if folder.is_dir() else {}
        if (0, 0, 0) in ranks:
            root = _root(ranks[(0, 0, 0)])
            if model_keys(root) and any(k in root for k in ROOT_KEYS):
                return folder, tracker
    return None


# The probe every folder reader starts with (find the folder, then read it): alike in shape.
def probe(path: Location) -> Detection | None:
    found = legacy_folder(path)
    if found is None:
        return None
    folder, tracker = found
    ranks = rank_files(folder)
    root = _root(ranks[(0, 0, 0)])
    tps, pps, eps = ({k[i] for k in ranks} for i in range(3))
    evidence = []
    if tracker is not None:
        evidence.append(save_dir_line(path, folder, tracker))
    first = ranks[(0, 0, 0)].relative_to(folder).as_posix()
    suffix = ("_PPP" if len(pps) > 1 else "") + ("_EEE" if len(eps) > 1 else "")
    evidence.append(
        f"{len(ranks)} rank file(s) mp_rank_TT{suffix}/{RANK_FILE}: tensor ranks {len(tps)}, "
        f"pipeline ranks {len(pps)}" + (f", expert ranks {len(eps)}" if len(eps) > 1 else "")
    )
    evidence.append(f"{first}: torch.save of " + ", ".join(str(k) for k in root))
    flat = [p for p in ranks.values() if (p.parent / DISTRIB_OPTIM).is_file()]
    if flat:
        evidence.append(f"{len(flat)} {DISTRIB_OPTIM} (DistributedOptimizer state)")
    kind = "training_state" if {"optimizer", "opt_param_scheduler"} & set(root) else "model"
    detail = (
        f"Megatron-LM legacy (--ckpt-format torch), iteration {root.get('iteration')}, "
        f"tp {len(tps)} pp {len(pps)}" + (f" ep {len(eps)}" if len(eps) > 1 else "")
    )
    return Detection(str(path), FAMILY, kind, tuple(evidence), detail)


def _logical_model(
    folder: Location, views: dict[tuple[int, int], CheckpointView], args: dict[str, Any]
) -> CheckpointView:
    """The model put together from every rank's shards (see :mod:`.tp`)."""
    tps = sorted({t for t, _ in views})
    pps = sorted({p for _, p in views})
    chunks = model_keys({k: None for k in views[(0, 0)].parts})
    merged: list[TensorRecord] = []
    rules: dict[str, str] = {}
    problems: list[str] = []
    offsets: Counter[str] = Counter()
    for chunk in chunks:  # virtual-pipeline chunk by chunk, stage by stage within one
        for pp in pps:
            shards = []
            for tp in tps:
                view = views.get((tp, pp))
                part = view.parts.get(chunk) if view is not None else None
                where = view.path.parent.name if view is not None else ""
                recs = [
                    replace(r, file=f"{where}/{r.file}") for r in (part.tensors if part else ())
                ]
                shards.append(recs)
            recs, stage_rules, stage_problems = merge_tp(shards, args)
            counts = layer_counts(recs)
            recs = offset_layers(recs, dict(offsets))
            offsets.update(counts)
            for r in recs:
                if r.name in rules:
                    problems.append(f"{r.name}: held by more than one stage; the first is shown")
                    continue
                merged.append(r)
            renamed = dict(zip((r.name for r in recs), stage_rules.values(), strict=True))
            rules.update({k: v for k, v in renamed.items() if k not in rules})
            problems += stage_problems
    by_rule = Counter(rules.values())
    evidence = [f"tp {len(tps)}: {why} ({n} tensor(s))" for why, n in sorted(by_rule.items())]
    if len(pps) > 1 or len(chunks) > 1:
        layers = ", ".join(f"{h} {n}" for h, n in offsets.items())
        evidence.append(
            f"{len(pps)} pipeline stage(s) x {len(chunks)} chunk(s) joined, layer numbers "
            f"offset by the layers before each ({layers} layers)"
        )
    detection = Detection(
        str(folder),
        FAMILY,
        "model",
        tuple(evidence),
        "Megatron model, tensor-parallel shards joined",
    )
    values = {"tp_merge": rules}
    return CheckpointView(
        folder, detection, files_of(merged), tuple(merged), values, warnings=tuple(problems)
    )


def _rng_part(folder: Location, views: dict[str, CheckpointView]) -> CheckpointView | None:
    parts = {name: v.parts["rng_state"] for name, v in views.items() if "rng_state" in v.parts}
    if not parts or next(iter(views)) not in parts:
        return None
    records: list[TensorRecord] = []
    values: dict[str, Any] = {}
    for name, part in parts.items():
        records += [
            replace(r, name=f"{name}.{r.name}", file=f"{name}/{r.file}") for r in part.tensors
        ]
        values.update({f"{name}.{k}": v for k, v in part.values.items()})
    missing = [n for n in views if n not in parts]
    evidence = [f"'rng_state' in {len(parts)} of {len(views)} rank file(s)"]
    if missing:
        evidence.append("no rng_state in " + ", ".join(missing))
    return CheckpointView(
        folder,
        Detection(str(folder), FAMILY, "rng", tuple(evidence), "Megatron RNG states of every rank"),
        files_of(records),
        tuple(records),
        values,
    )


def open_megatron_legacy(path: Location, detection: Detection) -> CheckpointView:
    expected = "a Megatron-LM iteration folder (mp_rank_*/)"
    folder, tracker = found_in(path, legacy_folder(path), expected)
    rel = key_prefix(path, folder)
    ranks = rank_files(folder)
    multi_pp = len({k[1] for k in ranks}) > 1
    views: dict[tuple[int, int], CheckpointView] = {}  # expert rank 0: the model's own ranks
    named: dict[str, CheckpointView] = {}
    for (tp, pp, ep), file in ranks.items():
        where = file.parent.name
        named[where] = rank_view(file, f"{where}/{RANK_FILE}")
        if ep == 0:
            views[(tp, pp)] = named[where]
    first = views[(0, 0)]
    root = _root(ranks[(0, 0, 0)])
    args = namespace_fields(root.get("args"))
    model = _logical_model(folder, views, args)
    parts: dict[str, CheckpointView] = {"model": model}
    notes = list(model.warnings)
    if len(views) < len(named):
        notes.append(
            "expert-parallel ranks: the model and optimizer parts join expert rank 0's files "
            "only (the other experts are in their mp_rank_TT_..._EEE parts)"
        )
    model_ranks = {v.path.parent.name: v for v in views.values()}
    flat = flat_optimizer(folder, model_ranks)
    if flat is not None:
        parts["optimizer"] = flat
        notes.append(FLAT_NOTE)
    elif not multi_pp:
        optimizer, why = logical_optimizer(folder, model_ranks, args)
        if optimizer is not None:
            parts["optimizer"] = optimizer
            notes += optimizer.warnings
        elif why:
            notes.append(why)
    elif any("optimizer" in v.parts for v in named.values()):
        notes.append(
            "optimizer states not joined: each pipeline stage has its own optimizer "
            "(see the mp_rank_TT_PPP parts)"
        )
    source = f"{first.path.parent.name}/{RANK_FILE}"
    common = state_parts(first.path, FAMILY, root, source)
    parts.update({k: v for k, v in common.items() if k != "args"})
    rng = _rng_part(folder, named)
    if rng is not None:
        parts["rng"] = rng
    if "args" in common:
        parts["args"] = common["args"]
    parts.update({where: as_rank_file(v) for where, v in named.items()})
    iterations = {
        n: v.parts["running_state"].values.get("iteration")
        for n, v in named.items()
        if "running_state" in v.parts
    }
    if len(set(iterations.values())) > 1:
        notes.append(f"the rank files disagree on the iteration: {iterations}")
    files: list[FileInfo] = []
    if tracker is not None:
        files.append(FileInfo("latest_checkpointed_iteration.txt", len(tracker)))
    records: list[TensorRecord] = []
    values: dict[str, Any] = {}
    for name, part in parts.items():
        if name in named:  # its content is in the logical parts: its files only
            sub = f"{rel}{name}/"
            files += [FileInfo(sub + f.path, f.nbytes) for f in part.files]
            continue
        records += prefixed(part.tensors, name, rel)
        values.update({f"{name}/{k}": v for k, v in part.values.items()})
    layout = [line] if (line := layout_line(args)) else []
    evidence = (*detection.evidence, *layout, *model.detection.evidence)
    detection = replace(detection, evidence=evidence)
    return CheckpointView(
        path, detection, tuple(files), tuple(records), values, parts, warnings=tuple(notes)
    )
