"""Lost index files rebuilt from the shards, in each writer's own convention.

- HF (``save_pretrained``): ``weight_map`` sorted by name, ``total_size`` an int of bytes
  (each storage once); transformers 5 also writes ``total_parameters``, which counts
  parameters but not buffers — the files do not say which is which, so it is left out (no
  loader reads it).
- ColossalAI model: ``weight_map`` in shard order then key order, ``total_size`` a float of
  MiB summed per tensor, per shard, then over shards (as ``StateDictSharder`` adds them).
- ColossalAI optimizer: ``{"param_groups": <group file>, "total_size": MiB of state tensors}``
  and ``weight_map`` from the stringified param id to its shard.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..loadable.damaged import CAI_GROUP, CAI_MODEL_SHARD, CAI_OPTIM_SHARD, HF_MODEL_SHARD
from ..loadable.files import Listing
from .plan import RepairPlan, index_bytes
from .shards import Refused, model_entries, optimizer_entries

MIB = 2**20
_NUM = re.compile(r"-(\d{5})(?:-of-\d{5})?\.|-stage-(\d{5})(?:-(\d{5}))?-shard-(\d{5})\.")


def _prefix(name: str, base: str) -> str:
    """ColossalAI's ``add_prefix`` component of a shard name ("" when none)."""
    rest = name[len(base) :].rsplit(".", 1)[0]  # without the extension
    return rest[1:].split("-", 1)[0] if rest.startswith(".") else ""


def _with_prefix(name: str, prefix: str) -> str:
    if not prefix:
        return name
    parts = name.split(".")
    return ".".join([*parts[:-1], prefix, parts[-1]])


def _order(name: str) -> tuple[int, ...]:
    m = _NUM.search(name)
    return tuple(int(g) for g in m.groups() if g) if m else (0,)


def _one_family(shards: list[str], pattern: re.Pattern[str]) -> tuple[str, str, str]:
    """(base, prefix, extension) shared by every shard, else Refused."""
    keys = set()
    for s in shards:
        m = pattern.fullmatch(s)
        assert m is not None
        keys.add((m.group(1), _prefix(s, m.group(1)), s.rsplit(".", 1)[1]))
    if len(keys) != 1:
        raise Refused(
            f"shards of {len(keys)} different saves lie together ({', '.join(shards[:4])})"
        )
    return keys.pop()


def _weight_map(folder: Path, shards: list[str]) -> dict[str, str]:
    wm: dict[str, str] = {}
    for s in shards:
        for name, _, _ in model_entries(folder / s):
            if name in wm:
                raise Refused(
                    f"{name} is in both {wm[name]} and {s}: which one the index named is lost"
                )
            wm[name] = s
    return wm


def hf_model(folder: Path, listing: Listing) -> RepairPlan:
    shards = listing.matching(HF_MODEL_SHARD)
    _base, prefix, ext = _one_family(shards, HF_MODEL_SHARD)
    what = "HF sharded model index"
    counts = {int(HF_MODEL_SHARD.fullmatch(s).group(3)) for s in shards}  # type: ignore[union-attr]
    if len(counts) != 1:
        raise Refused(f"shards say different totals -of-{sorted(counts)}")
    n = counts.pop()
    have = {int(HF_MODEL_SHARD.fullmatch(s).group(2)) for s in shards}  # type: ignore[union-attr]
    gone = sorted(set(range(1, n + 1)) - have)
    if gone:
        raise Refused(f"shard(s) {', '.join(f'{k:05d}' for k in gone)} of {n:05d} are missing too")
    shards = sorted(shards)
    wm = _weight_map(folder, shards)
    total, seen = 0, set()
    for s in shards:
        for _, nbytes, storage in model_entries(folder / s):
            if (s, storage) not in seen:
                seen.add((s, storage))
                total += nbytes
    name = (
        "model.safetensors.index.json" if ext == "safetensors" else "pytorch_model.bin.index.json"
    )
    name = _with_prefix(name, prefix)  # a variant goes where transformers' _add_variant puts it
    notes = (
        "total_size in bytes (HF convention)",
        "total_parameters (transformers 5) left out: the shards do not tell parameters from buffers",
    )
    return RepairPlan(
        folder,
        what,
        name,
        index_bytes({"total_size": total}, dict(sorted(wm.items()))),
        tuple(shards),
        notes=notes,
        expect=dict(wm),
    )


def colossal_model(folder: Path, listing: Listing) -> RepairPlan:
    shards = listing.matching(CAI_MODEL_SHARD)
    _base, prefix, ext = _one_family(shards, CAI_MODEL_SHARD)
    shards = sorted(shards, key=_order)
    _contiguous(shards)
    wm = _weight_map(folder, shards)
    total: float = 0
    for s in shards:
        shard_size = 0.0
        for _, nbytes, _ in model_entries(folder / s):
            shard_size += nbytes / MIB
        total = total + shard_size
    index = (
        "model.safetensors.index.json" if ext == "safetensors" else "pytorch_model.bin.index.json"
    )
    name = _with_prefix(index, prefix)
    return RepairPlan(
        folder,
        "ColossalAI sharded model index",
        name,
        index_bytes({"total_size": total}, wm),
        tuple(shards),
        notes=("total_size in MiB (ColossalAI convention)",),
        expect=dict(wm),
    )


def _contiguous(shards: list[str]) -> None:
    plain = [o[0] for s in shards if len(o := _order(s)) == 1]
    if plain and plain != list(range(1, len(plain) + 1)):
        gone = sorted(set(range(1, max(plain) + 1)) - set(plain))
        raise Refused(f"shard(s) {', '.join(f'{k:05d}' for k in gone)} are missing too")


def colossal_optimizer(folder: Path, listing: Listing) -> RepairPlan:
    shards = listing.matching(CAI_OPTIM_SHARD)
    groups = listing.matching(CAI_GROUP)
    if len(groups) != 1:
        raise Refused(
            "the param-group file (pytorch_optim_group.bin) is gone: the groups "
            "cannot be rebuilt from the shards"
            if not groups
            else f"{len(groups)} param-group files lie together: {', '.join(groups)}"
        )
    if not shards:
        raise Refused("no optimizer shard lies beside the param-group file")
    _base, prefix, ext = _one_family(shards, CAI_OPTIM_SHARD)
    if _prefix(groups[0], "pytorch_optim_group") != prefix:
        raise Refused(f"{groups[0]} does not belong to shards {shards[0]} (another prefix)")
    shards = sorted(shards, key=_order)
    _contiguous(shards)
    wm: dict[str, str] = {}
    total: float = 0
    for s in shards:
        shard_size = 0.0
        for pid, sizes in optimizer_entries(folder / s):
            if str(pid) in wm:
                raise Refused(f"param id {pid} is in both {wm[str(pid)]} and {s}")
            wm[str(pid)] = s
            state_size = 0.0
            for nbytes in sizes:
                state_size += nbytes / MIB
            shard_size += state_size
        total = total + shard_size
    index = (
        "optimizer.safetensors.index.json"
        if ext == "safetensors"
        else "pytorch_optim.bin.index.json"
    )
    name = _with_prefix(index, prefix)
    meta = {"param_groups": groups[0], "total_size": total}
    return RepairPlan(
        folder,
        "ColossalAI sharded optimizer index",
        name,
        index_bytes(meta, wm),
        (*shards, groups[0]),
        notes=("total_size in MiB of state tensors (ColossalAI convention)",),
        expect=dict(wm),
    )
