"""What both Megatron layouts share: the save dir, ``args``, and the small parts of a state.

Megatron-LM's ``save_checkpoint`` (``megatron/training/checkpointing.py``) writes, in a save
dir, ``latest_checkpointed_iteration.txt`` (the iteration as text, or ``release``) beside one
folder per saved iteration, ``iter_NNNNNNN/`` (``release/`` for a released model). Inside, the
state is either megatron-core ``dist_checkpointing`` (``common.pt`` + torch DCP, see
:mod:`.dist`) or the legacy per-rank ``mp_rank_TT[_PPP]/model_optim_rng.pt``
(:mod:`.legacy`). Both hold the same non-tensor entries, turned into parts here:

- ``opt_param_scheduler`` -> ``scheduler`` (``OptimizerParamScheduler.state_dict()``:
  ``max_lr``, ``lr_warmup_steps``, ``num_steps``, ``lr_decay_steps``, ``lr_decay_style``, ...;
  Megatron-LM steps it by the global batch size, so ``num_steps`` counts *samples*);
- ``iteration``, ``num_floating_point_operations_so_far``, ``checkpoint_version`` and the
  sample counters of ``args`` (``consumed_train_samples``, ``global_batch_size``, ...) ->
  ``running_state`` (``iteration`` = optimizer steps taken);
- ``args`` (an ``argparse.Namespace``, read by the allow-list unpickler as an inert object)
  -> ``args``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ...io.location import Location
from ...io.paths import resolve_inside
from ...io.safe_pickle import OpaqueObject
from ...types import Detection, FileInfo, TensorRecord
from ...view import CheckpointView

TRACKER = "latest_checkpointed_iteration.txt"
ITER_DIR = re.compile(r"^iter_(\d{7,})$")
RELEASE = "release"
# args fields that place the run (copied into the running_state part)
RUN_ARGS = (
    "consumed_train_samples",
    "skipped_train_samples",
    "consumed_valid_samples",
    "global_batch_size",
    "micro_batch_size",
    "data_parallel_size",
    "train_iters",
    "train_samples",
)
RUN_ROOT = ("iteration", "num_floating_point_operations_so_far", "checkpoint_version")
SCHEDULER_KEYS = {"max_lr", "lr_warmup_steps", "num_steps", "lr_decay_style"}
SCHEDULER_DETAIL = (
    "Megatron OptimizerParamScheduler (num_steps counts samples: iterations x global batch size)"
)
RUN_DETAIL = "Megatron run position (iteration = optimizer steps taken)"
ARGS_DETAIL = "Megatron-LM arguments (argparse.Namespace)"


def read_tracker(save_dir: Location) -> str | None:
    """The text of ``latest_checkpointed_iteration.txt`` in ``save_dir`` (None if absent)."""
    tracker = save_dir / TRACKER
    if not tracker.is_file() or tracker.stat().st_size > 256:
        return None
    text = tracker.read_text(encoding="utf-8", errors="replace").strip()
    return text or None


def tracked_folder(save_dir: Location) -> tuple[Location, str] | None:
    """The iteration folder the tracker names (``iter_0000004`` for ``4``), when it exists."""
    text = read_tracker(save_dir)
    if text is None:
        return None
    name = RELEASE if text == RELEASE else (f"iter_{int(text):07d}" if text.isdigit() else None)
    if name is None:
        return None
    folder = resolve_inside(save_dir, name, save_dir / TRACKER)
    return (folder, text) if folder.is_dir() else None


def save_dir_line(save_dir: Location, folder: Location, text: str) -> str:
    """One line on what a save dir holds: the tracker, the folder it names, the others."""
    iters = sorted(
        c.name
        for c in save_dir.iterdir()
        if c.is_dir() and (ITER_DIR.match(c.name) or c.name == RELEASE)
    )
    others = [n for n in iters if n != folder.name]
    line = f"save dir: {TRACKER} names iteration {text} -> {folder.name}/"
    if others:
        shown = ", ".join(others[:4]) + (", ..." if len(others) > 4 else "")
        line += f" ({len(others)} other iteration folder(s): {shown})"
    return line


def iteration_of(folder: Location) -> int | None:
    """The iteration an ``iter_NNNNNNN`` folder's name gives."""
    m = ITER_DIR.match(folder.name)
    return int(m.group(1)) if m else None


def namespace_fields(obj: Any) -> dict[str, Any]:
    """The fields of a pickled ``argparse.Namespace`` (an inert object), else ``{}``."""
    if isinstance(obj, OpaqueObject) and isinstance(obj.state, dict):
        return {str(k): v for k, v in obj.state.items()}
    if isinstance(obj, dict):
        return {str(k): v for k, v in obj.items()}
    return {}


def is_scheduler_state(obj: Any) -> bool:
    return isinstance(obj, dict) and len(SCHEDULER_KEYS & set(map(str, obj))) >= 3


def state_parts(
    path: Location, family: str, root: dict[str, Any], source: str
) -> dict[str, CheckpointView]:
    """The ``scheduler``, ``running_state`` and ``args`` parts of a Megatron state ``root``
    (``common.pt``'s dict or a ``model_optim_rng.pt``); ``source`` names the file."""
    parts: dict[str, CheckpointView] = {}
    sched = root.get("opt_param_scheduler")
    if is_scheduler_state(sched):
        assert isinstance(sched, dict)
        shown = ", ".join(f"{k} {sched[k]}" for k in ("num_steps", "max_lr") if k in sched)
        parts["scheduler"] = _part(
            path,
            family,
            "scheduler",
            f"'opt_param_scheduler' in {source}: {shown}",
            SCHEDULER_DETAIL,
            {str(k): v for k, v in sched.items()},
        )
    args = namespace_fields(root.get("args"))
    run = {k: root[k] for k in RUN_ROOT if k in root}
    run.update({k: args[k] for k in RUN_ARGS if k in args})
    if "iteration" in run:
        parts["running_state"] = _part(
            path,
            family,
            "running_state",
            f"'iteration' {run['iteration']} in {source}"
            + (
                f", args.consumed_train_samples {run['consumed_train_samples']}"
                if "consumed_train_samples" in run
                else ""
            ),
            RUN_DETAIL,
            run,
        )
    if args:
        name = root["args"].qualified_name if isinstance(root.get("args"), OpaqueObject) else ""
        parts["args"] = _part(
            path,
            family,
            "args",
            f"'args' in {source}: pickled {name or 'dict'} ({len(args)} fields)",
            ARGS_DETAIL,
            args,
        )
    return parts


def _part(
    path: Location, family: str, kind: str, evidence: str, detail: str, values: dict[str, Any]
) -> CheckpointView:
    detection = Detection(str(path), family, kind, (evidence,), detail)
    return CheckpointView(path, detection, (), (), values)  # its file is counted by the state


def arg(args: dict[str, Any], name: str, default: Any = None) -> Any:
    """``args.<name>`` when it is a plain value (ints, floats, strings, bools), else default."""
    value = args.get(name, default)
    return value if value is None or isinstance(value, bool | int | float | str) else default


LAYOUT_ARGS = (
    ("tensor_model_parallel_size", "tp"),
    ("pipeline_model_parallel_size", "pp"),
    ("virtual_pipeline_model_parallel_size", "vpp"),
    ("context_parallel_size", "cp"),
    ("expert_model_parallel_size", "ep"),
    ("data_parallel_size", "dp"),
    ("world_size", "world size"),
)


def layout_line(args: dict[str, Any]) -> str | None:
    """The parallel layout that wrote the state, as its ``args`` record it."""
    found = [(label, arg(args, key)) for key, label in LAYOUT_ARGS]
    shown = [f"{label} {value}" for label, value in found if value is not None]
    return "written at " + ", ".join(shown) + " (args)" if shown else None


def files_of(records: Iterable[TensorRecord]) -> tuple[FileInfo, ...]:
    """The files a part's records lie in, each sized by those records' bytes (the parts of a
    state share its files)."""
    sizes: dict[str, int] = {}
    for r in records:
        sizes[r.file] = sizes.get(r.file, 0) + r.nbytes
    return tuple(FileInfo(f, n) for f, n in sorted(sizes.items()))
