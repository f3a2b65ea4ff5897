"""Every known checkpoint family, registered with its probe and its opener.

Single-family entries come first: a reader's own probe and opener. Composite entries follow:
their probes work over the single-family results (a training state is told by what its
children are; a DeepSpeed save folder, a PEFT adapter or a universal save folder yields to the
family that owns it, :mod:`.precedence`) and their openers open the parts with the parts' own
entries. Detection tries every entry of a target in priority order, lower first, whichever
group it was registered in.
"""

from __future__ import annotations

from ..readers import json_files, litgpt, safetensors_file, torch_pickle
from ..readers.dcp import folder as dcp
from ..readers.deepspeed import folder as deepspeed
from ..readers.deepspeed import universal as deepspeed_universal
from ..readers.gguf import file as gguf_file
from ..readers.hf import folder as hf_folder
from ..readers.hf import peft_adapter, sharded_index
from ..readers.megatron import dist as megatron_dist
from ..readers.megatron import legacy as megatron_legacy
from ..readers.quantized import folder as quantized_folder
from ..readers.torchtune import folder as torchtune
from ..readers.torchtune import recipe as torchtune_recipe
from . import precedence, torchtune_output, training_state
from .detect import detect
from .registry import FormatSpec, register, spec_for, specs

# --- one family: a reader's probe and opener -------------------------------------------------
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
    FormatSpec(
        "sharded-index",
        ("hf-sharded", "colossalai-sharded-model", "colossalai-sharded-optimizer"),
        "dir",
        50,
        sharded_index.probe_dir,
        sharded_index.open_sharded,
    )
)
register(  # before the plain HF entries: a folder whose config.json names a quantization_config
    FormatSpec(
        "hf-quantized",
        (quantized_folder.FAMILY,),
        "dir",
        45,
        quantized_folder.probe,
        quantized_folder.open_quantized,
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
register(  # llama.cpp's format: the GGUF magic and a header that parses; a split opens its set
    FormatSpec("gguf", ("gguf",), "file", 12, gguf_file.probe, gguf_file.open_gguf)
)
register(  # last of the folders: a folder whose one checkpoint is one GGUF export (file or set)
    FormatSpec(
        "gguf-folder", ("gguf",), "dir", 90, gguf_file.probe_folder, gguf_file.open_gguf_folder
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

# --- composite: probes over the single-family results, openers over the parts' entries -------
register(  # before "deepspeed": a universal folder holds a copied model-states file too
    FormatSpec(
        "deepspeed-universal",
        ("deepspeed-universal",),
        "dir",
        15,
        precedence.probe_universal,
        deepspeed_universal.open_universal,
    )
)
register(  # yields to a training state around its tag folder
    FormatSpec(
        "deepspeed",
        ("deepspeed",),
        "dir",
        20,
        precedence.probe_deepspeed,
        deepspeed.open_deepspeed,
    )
)
register(  # yields to a training state around the adapter
    FormatSpec(
        "peft-adapter",
        ("peft-adapter",),
        "dir",
        30,
        precedence.probe_peft_adapter,
        peft_adapter.open_adapter,
    )
)
register(  # an output folder: epoch_N/ weights beside recipe_state/recipe_state.pt
    FormatSpec(
        "torchtune", ("torchtune",), "dir", 35, torchtune.probe, torchtune_output.open_output
    )
)
register(  # before the training state: lit_model.pth beside LitGPT's model_config.yaml
    FormatSpec("litgpt", (litgpt.FAMILY,), "dir", 38, litgpt.probe, litgpt.open_folder)
)
register(
    FormatSpec(
        training_state.NAME,
        ("training-state",),
        "dir",
        40,
        training_state.probe,
        training_state.open_training_state,
    )
)
register(  # before "torch": recipe_state.pt is a torch.save file of the optimizer and run state
    FormatSpec(
        "torchtune-recipe-state",
        ("torchtune",),
        "file",
        15,
        torchtune_recipe.probe_file,
        torchtune_output.open_recipe_state,
    )
)

FAMILIES = tuple(dict.fromkeys(f for s in specs() for f in s.families))

__all__ = ["FAMILIES", "FormatSpec", "detect", "register", "spec_for", "specs"]
