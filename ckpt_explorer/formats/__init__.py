"""Every known checkpoint family, registered with its probe and its reader."""

from __future__ import annotations

from ..readers import (
    bundle,
    dcp,
    deepspeed,
    deepspeed_universal,
    hf_folder,
    json_files,
    megatron_dist,
    megatron_legacy,
    peft_adapter,
    safetensors_file,
    sharded_index,
    torch_pickle,
    torchtune,
    torchtune_recipe,
)
from .registry import FormatSpec, detect, register, spec_for, specs

register(FormatSpec("torch-dcp", ("torch-dcp",), "dir", 10, dcp.probe, dcp.open_dcp))
register(  # before "torch-dcp": a dist_checkpointing folder holds a DCP checkpoint too
    FormatSpec(
        "megatron-dist",
        ("megatron-dist",),
        "dir",
        5,
        megatron_dist.probe,
        megatron_dist.open_megatron_dist,
    )
)
register(
    FormatSpec(
        "megatron-legacy",
        ("megatron-legacy",),
        "dir",
        6,
        megatron_legacy.probe,
        megatron_legacy.open_megatron_legacy,
    )
)
register(
    FormatSpec("deepspeed", ("deepspeed",), "dir", 20, deepspeed.probe, deepspeed.open_deepspeed)
)
register(  # before "deepspeed": a universal folder holds a copied model-states file too
    FormatSpec(
        "deepspeed-universal",
        ("deepspeed-universal",),
        "dir",
        15,
        deepspeed_universal.probe,
        deepspeed_universal.open_universal,
    )
)
register(
    FormatSpec(
        "peft-adapter", ("peft-adapter",), "dir", 30, peft_adapter.probe, peft_adapter.open_adapter
    )
)
register(  # an output folder: epoch_N/ weights beside recipe_state/recipe_state.pt
    FormatSpec("torchtune", ("torchtune",), "dir", 35, torchtune.probe, torchtune.open_output)
)
register(
    FormatSpec("training-state", ("training-state",), "dir", 40, bundle.probe, bundle.open_bundle)
)
register(
    FormatSpec(
        "sharded-index",
        ("hf-sharded", "colossalai-sharded-model", "colossalai-sharded-optimizer"),
        "dir",
        50,
        sharded_index.probe_dir,
        sharded_index.open_sharded,
    )
)
register(FormatSpec("hf-single", ("hf-single",), "dir", 60, hf_folder.probe, hf_folder.open_folder))
register(
    FormatSpec(
        "safetensors",
        ("safetensors", "colossalai-safetensors", "colossalai-flat-optimizer"),
        "file",
        10,
        safetensors_file.probe,
        safetensors_file.open_safetensors,
    )
)
register(  # before "torch": recipe_state.pt is a torch.save file of the optimizer and run state
    FormatSpec(
        "torchtune-recipe-state",
        ("torchtune",),
        "file",
        15,
        torchtune_recipe.probe_file,
        torchtune_recipe.open_recipe_state,
    )
)
register(
    FormatSpec(
        "torch",
        ("torch-zip", "torch-legacy"),
        "file",
        20,
        torch_pickle.probe,
        torch_pickle.open_torch,
    )
)
register(
    FormatSpec(
        "index-file",
        ("hf-sharded", "colossalai-sharded-model", "colossalai-sharded-optimizer"),
        "file",
        30,
        sharded_index.probe_file,
        sharded_index.open_sharded,
    )
)
register(
    FormatSpec(
        "running-states",
        ("running-states-json",),
        "file",
        40,
        json_files.probe_running_states,
        json_files.open_running_states,
    )
)

FAMILIES = tuple(dict.fromkeys(f for s in specs() for f in s.families))

__all__ = ["FAMILIES", "FormatSpec", "detect", "register", "spec_for", "specs"]
