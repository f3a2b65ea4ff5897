"""Find the checkpoints of a run folder by their names (no file is opened here).

Names recognised (N = a step; ``epoch-E_step-S`` gives S):
``checkpoint-N`` (HF Trainer), ``epoch-E_step-S`` (ColossalAI / ColossalChat), ``step-N`` /
``step_N`` / ``stepN`` (plain loops, DCP), ``global_stepN`` (DeepSpeed tags, beside ``latest``),
``iter_N`` / ``iter-N`` (Megatron-style), ``ckpt-N`` / ``ckpt_N`` and torch/safetensors files
with a number in their name (``model_1000.pt``, Lightning's ``epoch=E-step=S[-vN].ckpt``; a
name that numbers only epochs gives no step). accelerate's ``checkpoint_N`` counts saves, not
steps: its number is kept as ``name_step`` but marked ``save_count``. Files without a number
(``last.pt``, timm's ``last.pth.tar`` / ``model_best.pth.tar``, its ``recovery-E-B.pth.tar``
whose numbers are an epoch and a batch) are candidates too; their step must come from their
content. Files that share a name step and differ by what surrounds it (``model_N.pt``,
``ema_N.pt``, ``optim_N.pt``; guided-diffusion's ``model050000.pt``, ``ema_0.9999_050000.pt``,
``opt050000.pt``) are the parts of one checkpoint (naming ``parts``): see :func:`group_parts`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import CkptExplorerError

_DIR_PATTERNS = (
    ("colossalai", re.compile(r"^epoch[-_]?(\d+)[-_]step[-_]?(\d+)$")),
    ("hf", re.compile(r"^checkpoint-(\d+)$")),  # not tmp-checkpoint-N: a save in progress
    ("save_count", re.compile(r"^checkpoint_(\d+)$")),
    ("deepspeed", re.compile(r"^global_step(\d+)$")),
    ("step", re.compile(r"^(?:step|iter|ckpt|iteration)[-_]?(\d+)$")),
)
FILE_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".pkl", ".tar")
_CONTENT_SUFFIXES = (".pt", ".pth", ".ckpt", ".tar")  # torch files: a step may be inside
_FILE_NUMBER = re.compile(r"(?:^|[-_a-z]|(?<!\d)\.)(\d+)(?:\.[a-z]+)+$")  # not 0.25.pt
# timm's CheckpointSaver ``recovery-<epoch>-<batch>.pth.tar``: neither number is a step
_RECOVERY = re.compile(r"^recovery-\d+-\d+(?:\.[a-z]+)+$")
# ``step=120`` / ``global_step_120`` / ``iter-5`` anywhere in a file name (Lightning's
# ``epoch=3-step=120.ckpt``, ``model_step_1000.pt``)
_FILE_STEP = re.compile(r"(?:^|[-_.=])(?:global_)?(?:step|iter|iteration)[-_=]?(\d+)(?=$|[-_.=])")
_FILE_EPOCH = re.compile(r"(?:^|[-_.=])epoch[-_=]?\d+(?=$|[-_.=])")
# Lightning's ModelCheckpoint appends ``-v1``, ``-v2`` when the name is already taken
_VERSION_SUFFIX = re.compile(r"-v\d+(?=(?:\.[a-z]+)+$)")
_NOT_CHECKPOINTS = ("training_args.bin", "rng_state.pth", "scheduler.pt", "optimizer.pt")


@dataclass(frozen=True)
class Candidate:
    """A file or folder of the run that looks like a checkpoint.

    Attributes:
        path: the file or folder.
        name_step: the step its name gives (None when the name has none).
        naming: ``hf``, ``colossalai``, ``deepspeed``, ``step``, ``file``, ``save_count``
            (a number that counts saves) or ``content`` (no number: the step must be read).
    """

    path: Path
    name_step: int | None
    naming: str
    parts: tuple[tuple[str, Path], ...] = ()

    @property
    def files(self) -> list[Path]:
        """The files to read: the parts' files, else the checkpoint itself."""
        return [f for _, f in self.parts] if self.parts else [self.path]


def name_step(name: str, is_dir: bool) -> tuple[int | None, str] | None:
    """(step, naming) from a checkpoint's name; None when the name is not a checkpoint's."""
    if is_dir:
        for naming, pattern in _DIR_PATTERNS:
            m = pattern.match(name)
            if m:
                return int(m.group(m.lastindex or 1)), naming
        return None
    if not name.endswith(FILE_SUFFIXES) or name in _NOT_CHECKPOINTS:
        return None
    if _RECOVERY.match(name.lower()):
        return None, "content"
    plain = _VERSION_SUFFIX.sub("", name.lower())
    m = _FILE_STEP.search(plain)
    if m:
        return int(m.group(1)), "file"
    m = _FILE_NUMBER.search(plain)
    if m and "-of-" not in name and not _FILE_EPOCH.search(plain):
        # model-00001-of-00002.safetensors is a shard; epoch=3.ckpt counts epochs
        return int(m.group(1)), "file"
    if name.endswith(_CONTENT_SUFFIXES):
        return None, "content"  # last.pt: a torch file whose step must be read from it
    return None


def discover(run_dir: str | Path) -> list[Candidate]:
    """The checkpoint candidates directly under ``run_dir``, sorted by name step then name.

    Raises:
        CkptExplorerError: ``run_dir`` is not a folder, or holds no checkpoint-like entry.
    """
    root = Path(run_dir)
    if not root.is_dir():
        raise CkptExplorerError(
            root,
            "a run folder holding checkpoints (checkpoint-N, global_stepN, step-N, ...)",
            "no folder at that path" if not root.exists() else "a file",
            "Pass the folder the training run saves its checkpoints into.",
        )
    out = []
    with os.scandir(root) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if entry.name.startswith("."):
            continue
        found = name_step(entry.name, entry.is_dir())
        if found is not None:
            out.append(Candidate(Path(entry.path), found[0], found[1]))
    folders = [c for c in out if c.path.is_dir()]
    # a folder of checkpoint folders: loose files are not checkpoints of it
    out = folders or group_parts(out)
    if name_step(root.name, True) is not None and not folders:
        raise CkptExplorerError(
            root,
            "a run folder holding checkpoints",
            f"one checkpoint ({root.name})",
            f"Pass the folder that holds it: {root.parent}",
        )
    if not out:
        raise CkptExplorerError(
            root,
            "a run folder holding checkpoints (checkpoint-N, epoch-E_step-S, global_stepN, "
            "step-N, or torch files with a step in their name or content)",
            f"{len(entries)} entries, none of them a checkpoint",
            "Pass the folder that holds the checkpoints, not one checkpoint.",
        )
    return sorted(out, key=lambda c: (c.name_step is None, c.name_step or 0, c.path.name))


def _series(name: str) -> str | None:
    """The part label of a file name with a step: the name without its step number and
    suffix, separators trimmed, plus ``/`` (``ema_0.9999_050000.pt`` -> ``ema_0.9999/``)."""
    plain = _VERSION_SUFFIX.sub("", name.lower())
    m = _FILE_STEP.search(plain) or _FILE_NUMBER.search(plain)
    if m is None:
        return None
    head = name[: m.start(1)]
    if m.re is _FILE_STEP:
        head = name[: m.start()]
    label = head.rstrip("-_.=").lower()
    return f"{label}/" if label else None


def group_parts(cands: list[Candidate]) -> list[Candidate]:
    """Merge the files that share a name step into one checkpoint of parts, when the run
    saves one file per part: some step has two or more files whose names differ only around
    the step (``model_5.pt`` and ``optim_5.pt``). Every file of such a series is then a part
    (a step where only ``model_35.pt`` was saved is a checkpoint of one part). The parts'
    roles (model, EMA, optimizer) are read from their content by the build, not from here."""
    by_step: dict[int, list[tuple[str, Candidate]]] = {}
    for c in cands:
        label = _series(c.path.name) if c.naming == "file" and c.name_step is not None else None
        if label is not None and c.name_step is not None:
            by_step.setdefault(c.name_step, []).append((label, c))
    series: set[str] = set()
    for members in by_step.values():
        labels = [label for label, _ in members]
        if len(members) > 1 and len(set(labels)) == len(labels):
            series.update(labels)
    if not series:
        return cands
    out = []
    grouped: set[Path] = set()
    for step, members in by_step.items():
        parts = tuple((label, c.path) for label, c in members if label in series)
        if not parts or len({label for label, _ in parts}) != len(parts):
            continue  # two files of one series at one step: left as they are (duplicates)
        grouped.update(f for _, f in parts)
        name = "+".join(f.name for _, f in parts)
        out.append(Candidate(parts[0][1].parent / name, step, "parts", parts))
    return out + [c for c in cands if c.path not in grouped]
