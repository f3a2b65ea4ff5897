"""ColossalAI 0.5.0 ``booster.load_model`` / ``load_optimizer`` / ``load_lr_scheduler``,
restated from ``colossalai/checkpoint_io`` (checkpoint_io_base, general_checkpoint_io, utils).

``has_index_file``: a file whose name fully matches ``(.*?).index((\\..*)?).json``, or a folder
with exactly one ``*.index.*json`` (two or more: AssertionError). Without one, ``load_model``
tries ``model.safetensors``, then ``pytorch_model.bin``, then ``torch.load`` of the path itself;
``load_optimizer`` of a folder raises ValueError. Every ``.bin`` goes through ``torch.load``
with torch's default ``weights_only``; a model index whose name holds ``safetensors`` reads its
shards with safetensors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import CkptExplorerError
from .files import INDEX_FILE, Listing, index_doc, is_safetensors, refused_global, weight_files
from .verdicts import Layout, LoaderCall, Verdict

MODEL, OPTIM, SCHED = (
    "colossalai.load_model",
    "colossalai.load_optimizer",
    "colossalai.load_lr_scheduler",
)
_TWO = "Expected to find one .index.json file in {p}, but found {n}"
_MOVE = "Keep one index per folder: move {names} that does not belong elsewhere."


def _missing(file: Path, safetensors: bool) -> tuple[str, str]:
    if safetensors:
        return "FileNotFoundError", f"No such file or directory: {file}"
    return "FileNotFoundError", f"[Errno 2] No such file or directory: '{file}'"


def _read_files(root: Path, files: list[str], safetensors: bool) -> tuple[str, str] | None:
    """The first failure reading ``files`` (in the loader's order), or None."""
    for name in files:
        f = root / name
        if not f.is_file():
            return _missing(f, safetensors)
        if safetensors:
            continue
        if is_safetensors(f):
            return "UnpicklingError", "Weights only load failed"
        g = refused_global(f)
        if g is not None:
            return "UnpicklingError", "Weights only load failed"
    return None


def _torch_file(p: Path) -> tuple[str, str] | None:
    if p.is_dir():
        return "IsADirectoryError", f"[Errno 21] Is a directory: '{p}'"
    return _read_files(p.parent, [p.name], safetensors=False)


def _verdict(
    loader: str,
    call: str,
    target: str,
    meant: bool,
    reads: list[str],
    failure: tuple[str, str] | None,
    fix: str = "",
    notes: Iterable[str] = (),
) -> Verdict:
    """``loads`` when ``failure`` is None, else ``fails`` with its (error, message)."""
    v = LoaderCall(loader, call, target)
    if failure is None:
        return v.loads(reads, meant=meant, notes=notes)
    return v.fails(reads, *failure, fix, meant=meant, notes=notes)


def _two_indexes(p: Path, indexes: list[str], verdict: Callable[..., Verdict]) -> list[Verdict]:
    """``has_index_file`` asserts one index per folder."""
    error = ("AssertionError", _TWO.format(p=p, n=len(indexes)))
    return [verdict(indexes, error, _MOVE.format(names=" or ".join(indexes)))]


def load_model(p: Path, target: str, layout: Layout) -> list[Verdict]:
    if layout.form not in ("hf-model", "colossalai-model", "model-file"):
        return []
    meant = layout.form == "colossalai-model"
    call = f"booster.load_model(model, {str(p)!r})"

    verdict = functools.partial(_verdict, MODEL, call, target, meant)

    if p.is_file():
        if INDEX_FILE.fullmatch(p.name):
            return [_sharded(p.parent, p.name, verdict, meant)]
        if p.name.endswith(".safetensors"):
            return [verdict([p.name], None)]
        return [verdict([p.name], _torch_file(p))]
    listing = Listing.of(p)
    indexes = listing.colossal_indexes()
    if len(indexes) > 1:
        return _two_indexes(p, indexes, verdict)
    if indexes:
        return [_sharded(p, indexes[0], verdict, meant)]
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (p / name).is_file():
            fail = None if name.endswith("safetensors") else _torch_file(p / name)
            return [verdict([name], fail)]
    fix = (
        f"Rebuild the index: `ckpt-explorer repair {p}`."
        if layout.repair
        else ("Point it at the index JSON or the weights file.")
    )
    return [verdict([], _torch_file(p), fix)]


def _sharded(folder: Path, index: str, verdict, written_here: bool = False) -> Verdict:  # type: ignore[no-untyped-def]
    doc = index_doc(folder / index)
    if doc is None:
        return verdict([index], ("JSONDecodeError", f"{index} is not a readable index"))
    files = weight_files(doc)
    st = "safetensors" in index
    if st and any(not f.endswith(".safetensors") for f in files):
        fail: tuple[str, str] | None = (
            "Exception",
            "load the model using `safetensors`, but no file endwith .safetensors",
        )
    else:
        fail = _read_files(folder.absolute(), files, st)
    notes = ["strict=True: every key of your model must be in weight_map"]
    tied = _tied_head(folder, doc["weight_map"]) if fail is None else None
    if tied is not None and written_here:  # HybridParallel's own load restores the tied head
        notes.append("lm_head.weight is left out (tied): TorchDDPPlugin's strict load fails")
    elif tied is not None:
        return verdict([index, *files], tied, TIED_HEAD_FIX, notes)
    return verdict([index, *files], fail, "Copy the missing shard again." if fail else "", notes)


TIED_HEAD_FIX = (
    "lm_head.weight is tied to the input embeddings and the writer left it out (nothing is "
    "missing from the shards): load with `booster.load_model(model, path, strict=False)` "
    "(the tie fills it) or with HybridParallelPlugin."
)


def _tied_head(folder: Path, names: dict[str, str]) -> tuple[str, str] | None:
    """strict=True on the model config.json describes: a tied ``lm_head.weight`` that the
    writer left out (transformers 5, HybridParallel sharded saves) is a missing key."""
    import json

    try:
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    tied = isinstance(cfg, dict) and cfg.get("tie_word_embeddings") is True
    embed = any(n.endswith(("wte.weight", "embed_tokens.weight")) for n in names)
    if tied and embed and "lm_head.weight" not in names:
        return "RuntimeError", 'Missing key(s) in state_dict: "lm_head.weight"'
    return None


def load_optimizer(p: Path, target: str, layout: Layout) -> list[Verdict]:
    if layout.form not in ("colossalai-optimizer", "optimizer-file"):
        return []
    meant = layout.form == "colossalai-optimizer"
    call = f"booster.load_optimizer(optimizer, {str(p)!r})"

    verdict = functools.partial(_verdict, OPTIM, call, target, meant)

    if p.is_file() and not INDEX_FILE.fullmatch(p.name):
        if p.name.endswith(".safetensors"):
            return [verdict([p.name], None)]
        return [verdict([p.name], _torch_file(p))]
    folder, indexes = (p.parent, [p.name]) if p.is_file() else (p, Listing.of(p).colossal_indexes())
    if len(indexes) > 1:
        return _two_indexes(p, indexes, verdict)
    if not indexes:
        fix = (
            f"Rebuild it from the shards and the group file: `ckpt-explorer repair {p}`."
            if layout.repair
            else "Copy the index and the param-group file again."
        )
        return [verdict([], ("ValueError", f"Cannot find index file in {p}"), fix)]
    index = folder / indexes[0]
    doc = index_doc(index)
    if doc is None:
        return [verdict([indexes[0]], ("JSONDecodeError", f"{indexes[0]} is not a readable index"))]
    group = doc.get("metadata", {}).get("param_groups")
    if not group:
        return [
            verdict(
                [indexes[0]],
                ("RuntimeError", f"Invalid index file path {index} for an optimizer"),
                "The index must name the param-group file in metadata.param_groups.",
            )
        ]
    files = weight_files(doc)
    fail = _read_files(folder.absolute(), [group], False)
    notes = []
    if fail is None:
        sizes = _group_sizes(folder / group)
        if sizes is None:
            fail = (
                "ValueError",
                f"The param_groups saved at {folder.absolute() / group} is not of List type",
            )
        else:
            notes.append(
                f"your optimizer must have {len(sizes)} param group(s) of "
                f"{', '.join(map(str, sizes))} parameter(s), as at save time"
            )
    if fail is None:
        torch_shards = [f for f in files if not f.endswith(".safetensors")]
        fail = _read_files(
            folder.absolute(), [f for f in files if f.endswith(".safetensors")], True
        )
        fail = fail or _read_files(folder.absolute(), torch_shards, False)
    return [
        verdict(
            [indexes[0], group, *files], fail, "Copy the missing file again." if fail else "", notes
        )
    ]


def _group_sizes(path: Path) -> list[int] | None:
    from ..readers.torch_pickle import torch_structure

    try:
        root = torch_structure(path).root
    except (CkptExplorerError, OSError):
        return None
    if not isinstance(root, list):
        return None
    return [len(g.get("params", [])) if isinstance(g, dict) else 0 for g in root]


def load_lr_scheduler(p: Path, target: str, layout: Layout) -> list[Verdict]:
    if layout.form != "scheduler-file":
        return []
    call = f"booster.load_lr_scheduler(lr_scheduler, {str(p)!r})"
    meant = p.name == "lr_scheduler"  # the name ColossalChat / Colossal-LLaMA save it under
    return [_verdict(SCHED, call, target, meant, [p.name], _torch_file(p))]
