"""How a model's tensors are laid out in the files of each built-in target.

Each function fills ``plan.files`` (and, for a folder, its index and side files) from the
tensors a source gives; a :class:`~ckpt_explorer.convert.targets.TargetSpec` names the one its
target uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..natural import natural_if_string_ordered
from .plan_types import ConversionPlan, PlannedFile, PlannedTensor

if TYPE_CHECKING:
    from .source_content import SourceContent

HF_DEFAULT_SHARD = 5 * 10**9

Planner = Callable[[ConversionPlan, "SourceContent", list[PlannedTensor], "int | None"], None]
"""Fills a plan's files from a source's tensors and the shard size (None: not sharded)."""


def split(tensors: list[PlannedTensor], max_bytes: int | None) -> list[list[PlannedTensor]]:
    """Shards in order: a new one starts when the next tensor would pass ``max_bytes``."""
    shards: list[list[PlannedTensor]] = [[]]
    size = 0
    for t in tensors:
        if max_bytes is not None and shards[-1] and size + t.nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return shards


def dcp_folder(
    plan: ConversionPlan, content: SourceContent, tensors: list[PlannedTensor], shard: int | None
) -> None:
    """A DCP folder: ``.metadata`` and the data files, written as one unit."""
    plan.output_is_dir = True
    plan.files = [PlannedFile(".metadata", "dcp", tuple(tensors), named=False)]


def one_file(writer: str, sharded: Planner | None = None) -> Planner:
    """One ``writer`` file at the destination; with a shard size, ``sharded`` lays it out."""

    def layout(
        plan: ConversionPlan,
        content: SourceContent,
        tensors: list[PlannedTensor],
        shard: int | None,
    ) -> None:
        if shard is None or sharded is None:
            plan.files = [PlannedFile(plan.destination.name, writer, tuple(tensors))]
        else:
            sharded(plan, content, tensors, shard)

    return layout


# Each layout maker returns a Planner closure of the same signature (the registry calls it).
def shard_folder(writer: str, stem: str, ext: str, default_shard: int | None = None) -> Planner:
    """A Hugging Face style folder: ``writer`` shards ``<stem>[-0000i-of-0000n].<ext>``, their
    index, config.json beside them (shards of ``default_shard`` bytes when none is given)."""

    def layout(
        plan: ConversionPlan,
        content: SourceContent,
        tensors: list[PlannedTensor],
        shard: int | None,
    ) -> None:
        from ..readers.hf.diffusers_config import WEIGHT_STEM, model_config

        plan.output_is_dir = True
        plan.copies = list(content.side_files)
        plan.written = [(name, dict(doc)) for name, doc in content.written]
        shard = shard or default_shard
        name = stem
        if any(n == "config.json" and model_config(src.parent) for src, n in plan.copies):
            name = WEIGHT_STEM  # diffusers from_pretrained reads diffusion_pytorch_model.*
        # a name-sorted source (safetensors headers) is packed in natural order: layers 0, 1 …
        shards = split(natural_if_string_ordered(tensors, lambda t: t.name), shard)
        n = len(shards)
        if n == 1:
            plan.files = [PlannedFile(f"{name}.{ext}", writer, tuple(shards[0]))]
            return
        plan.files = [
            PlannedFile(f"{name}-{i:05d}-of-{n:05d}.{ext}", writer, tuple(s))
            for i, s in enumerate(shards, 1)
        ]
        plan.index = (f"{name}.{ext}.index.json", "hf")

    return layout
