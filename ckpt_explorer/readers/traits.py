"""The traits of a checkpoint: what its family always is, plus what its reader found.

A reader sets the traits it decides from a file's content on the :class:`Detection` (an
accelerate RNG file, an EMA copy, DeepSpeed's flat optimizer states ...). Those every
checkpoint of a family shares are here, so consumers read ``view.traits`` and never compare
family or detail strings.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..types import Detection, Traits
from .optimizer_info import keeps_parameter_order

# One-view training states stored in parameter order, beside the model families that keep it
# (:func:`.optimizer_info.keeps_parameter_order`).
_ORDERED_STATES = ("torch-dcp", "deepspeed")

FAMILY_TRAITS: dict[str, Traits] = {
    "torch-dcp": Traits(dcp_items=True, loaded_by="dcp"),
    "deepspeed": Traits(
        module_prefix="module.",
        position_in_values=True,
        zero_partitions=True,
        loaded_by="deepspeed",
    ),
    "deepspeed-universal": Traits(fp32_masters=True),
    "megatron-dist": Traits(megatron_names=True),
    "megatron-legacy": Traits(megatron_names=True),
    "training-state": Traits(part_files=True),
    "hf-sharded": Traits(loaded_by="from_pretrained"),
    "hf-single": Traits(loaded_by="from_pretrained"),
    "hf-quantized": Traits(loaded_by="from_pretrained"),  # with the scheme's package installed
    "colossalai-sharded-model": Traits(loaded_by="colossalai"),
    "colossalai-sharded-optimizer": Traits(loaded_by="colossalai"),
    "peft-adapter": Traits(loaded_by="peft"),
    "torch-zip": Traits(loaded_by="torch.load"),
    "torch-legacy": Traits(loaded_by="torch.load"),
    "gguf": Traits(loaded_by="llama.cpp"),
}


def traits_of(detection: Detection, files: Iterable[str]) -> Traits:
    """The traits of a checkpoint detected as ``detection`` made of ``files``."""
    family = detection.family
    ordered = family in _ORDERED_STATES or keeps_parameter_order(family, files)
    own = FAMILY_TRAITS.get(family, Traits())
    return detection.traits.merged(own).merged(Traits(keeps_order=ordered))
