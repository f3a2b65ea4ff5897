"""Every known checkpoint family, registered with its probe and its reader."""

from __future__ import annotations

from ..readers import (
    bundle,
    dcp,
    deepspeed,
    hf_folder,
    json_files,
    peft_adapter,
    safetensors_file,
    sharded_index,
    torch_pickle,
)
from .registry import FormatSpec, detect, register, spec_for, specs

register(FormatSpec("torch-dcp", ("torch-dcp",), "dir", 10, dcp.probe, dcp.open_dcp))
register(
    FormatSpec("deepspeed", ("deepspeed",), "dir", 20, deepspeed.probe, deepspeed.open_deepspeed)
)
register(
    FormatSpec(
        "peft-adapter", ("peft-adapter",), "dir", 30, peft_adapter.probe, peft_adapter.open_adapter
    )
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
