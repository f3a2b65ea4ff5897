"""Every family works remotely because it works locally: real fixture checkpoints of each
family, served over HTTP with Range support on 127.0.0.1 (never the internet), list as they do
from the disk (``inspect --json``, paths shown as URLs) and load the same tensors.

The server serves the makers' own output folders (read-only). A URL is its own root: what
lies above it is not listed, so evidence a reader finds in a parent folder (a universal
checkpoint's ``latest_universal``) is the one thing a URL of the subfolder does not show;
Megatron and DeepSpeed are opened at their save folders, as a user gives them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.cli import main

sys.path.insert(0, str(Path(__file__).parent.parent))
from remote_servers import RangeServer

pytest.importorskip("aiohttp")

# (maker, folder or file under the maker's output, tensors to load and compare: their count)
ABOVE = {  # evidence found in the parent folder, which a URL of the subfolder does not list
    "zero1_bf16/run/global_step4_universal": "'latest_universal' in the save folder names this folder"
}
CASES = [
    ("hf", "gpt2_sharded", 2),  # HF sharded safetensors (save_pretrained)
    ("hf", "gpt2_bin_sharded", 2),  # HF sharded .bin shards
    ("hf", "llama_single", 1),  # one model.safetensors beside config.json
    ("hf", "llama_lora", 1),  # PEFT adapter
    ("torch", "model.pt", 2),  # torch.save zip
    ("torch", "model_legacy.pt", 2),  # legacy (pre-zip) torch.save
    ("torch", "model_noext", 1),  # a zip without an extension
    ("torch", "optimizer.pt", 1),  # an optimizer state_dict
    ("torch", "shared_storage.pt", 2),  # views of one storage
    ("colossalai", "general/sharded_safetensors", 1),  # ColossalAI sharded model
    ("colossalai", "general/optimizer_sharded", 1),  # ColossalAI sharded optimizer + groups
    ("colossalai", "async/optimizer.safetensors", 1),  # ColossalAI flattened optimizer
    ("colossalai", "ddp/epoch-1_step-3", 1),  # a training-state folder of parts
    ("colossalai", "pipeline/modeling", 1),  # pipeline -stage- shards
    ("dcp", "dcp_training_state", 2),  # torch DCP (model + optimizer + bytes items)
    ("dcp", "dcp_fqn_state", 1),  # DCP keyed by FQN (get_state_dict)
    ("deepspeed", "ds_zero2", 2),  # DeepSpeed ZeRO-2 save folder
    ("deepspeed", "ds_zero3", 1),  # DeepSpeed ZeRO-3 save folder
    ("realworld_megatron", "mcore_gpt/base", 1),  # megatron-core dist_checkpointing
    ("realworld_megatron", "legacy_tp2/base", 1),  # Megatron-LM legacy, TP 2
    ("realworld_dsuniversal", "zero1_bf16/run/global_step4_universal", 1),  # universal
    ("realworld_tune", "full/base", 1),  # torchtune output folder
    ("realworld_hf", "trainer/run/checkpoint-2", 1),  # HF Trainer training state
    ("gguf", "q8_0.gguf", 2),  # GGUF, block-quantized (llama.cpp's converter)
    ("gguf", "split/split-00002-of-00003.gguf", 2),  # a split GGUF set, from any of its files
    ("quantized", "ct_w4a16", 1),  # compressed-tensors pack-quantized folder
    ("quantized", "fp8_block", 1),  # DeepSeek-V3 FP8 with block scales
]


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, RangeServer]]:
    made: dict[str, RangeServer] = {}
    yield made
    for server in made.values():
        server.close()


def _served(maker: str, real_checkpoints: Any, servers: dict[str, RangeServer]) -> Any:
    out, _ = real_checkpoints(maker)
    if maker not in servers:
        servers[maker] = RangeServer(out)
    return out, servers[maker]


def _inspect(target: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["inspect", target, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return code, json.loads(captured.out)


@pytest.mark.parametrize(("maker", "case", "loads"), CASES, ids=[f"{m}:{c}" for m, c, _ in CASES])
def test_a_family_over_http_lists_and_loads_as_on_disk(
    maker: str,
    case: str,
    loads: int,
    real_checkpoints: Any,
    servers: dict[str, RangeServer],
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, server = _served(maker, real_checkpoints, servers)
    local = out / case
    assert local.exists(), local
    url = f"{server.url}/{case}"
    _, remote = _inspect(url, capsys)
    _, disk = _inspect(str(local), capsys)
    assert remote.pop("path") == url and disk.pop("path") == str(local)
    assert remote.pop("loaders") is None and disk.pop("loaders") is not None
    shown = json.loads(json.dumps(remote).replace(url, str(local)))
    if case in ABOVE:
        assert ABOVE[case] in disk["evidence"] and ABOVE[case] not in shown["evidence"]
        disk["evidence"].remove(ABOVE[case])
    assert shown == disk

    view, here = open_checkpoint(url), open_checkpoint(local)
    assert str(view.path) == url and view.names() == here.names()
    picked = [r.name for r in here.tensors if r.read_values is not None and r.numel]
    step = max(1, len(picked) // max(1, loads))
    import torch

    for name in picked[::step][:loads]:
        a, b = view.load(name), here.load(name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        flat_a, flat_b = a.contiguous().reshape(-1), b.contiguous().reshape(-1)
        assert torch.equal(flat_a.view(torch.uint8), flat_b.view(torch.uint8)), name
