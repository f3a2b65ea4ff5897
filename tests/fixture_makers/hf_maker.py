"""Hugging Face fixtures: `python tests/fixture_makers/hf_maker.py OUT_DIR`.

Tiny models are built from configs (no downloads) and written with the real save_pretrained.
Cases (family, kind):
- gpt2_sharded   transformers 5: GPT-2 (n_embd=32, 2 layers, vocab 100, tied lm_head) with a small
                 max_shard_size -> model-0000K-of-0000N.safetensors + model.safetensors.index.json
                 ("hf-sharded", "model"). transformers 5 leaves the tied lm_head.weight out of the
                 files and the index; the manifest lists exactly what is on disk (read back with
                 safe_open, every name cross-checked against model.state_dict()); the dropped names
                 are under the extra key "omitted_tied".
- llama_single   transformers 5: tiny Llama, unsharded model.safetensors + config.json
                 ("hf-single", "model").
- gpt2_bin_sharded  transformers 4.51.3 (side folder, in a subprocess with it first on PYTHONPATH):
                 save_pretrained(safe_serialization=False, max_shard_size small) ->
                 pytorch_model-0000K-of-0000N.bin + pytorch_model.bin.index.json ("hf-sharded",
                 "model"). Unlike transformers 5, 4.51.3 KEEPS the tied lm_head.weight in the .bin
                 shard (sharing storage with transformer.wte.weight, same shard) and in weight_map,
                 while index total_size counts that storage once.
- llama_lora     peft 0.13.2 (works with transformers 5 here) get_peft_model(LoRA r=4 on q_proj,
                 v_proj, init_lora_weights=False so lora_B is not all zeros).save_pretrained ->
                 adapter_model.safetensors + adapter_config.json ("peft-adapter", "adapter").
The side folder is `$TF4_SIDE_DIR`, else `<venv>/side/transformers4`.
Runs in about 25-30 s (transformers imports dominate); outputs about 470 KB together.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from _manifest import fresh_dir, main_out_dir, run_maker, tensor_entry

TF4_CHILD_FLAG = "--tf4-child"


def _gpt2(seed: int = 0) -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(
        n_embd=32,
        n_layer=2,
        n_head=2,
        vocab_size=100,
        n_positions=64,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    return GPT2LMHeadModel(cfg).eval()


def _llama(seed: int = 1) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=100,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).eval()


def _files_tensors(folder: Path, files: list[str]) -> dict[str, torch.Tensor]:
    """Every tensor actually stored in the given safetensors / .bin files (duplicates raise)."""
    from safetensors import safe_open

    out: dict[str, torch.Tensor] = {}
    for name in files:
        path = folder / name
        if name.endswith(".safetensors"):
            with safe_open(str(path), framework="pt") as f:
                part = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        else:
            part = torch.load(path, map_location="cpu", weights_only=True)
        for k, v in part.items():
            if k in out:
                raise AssertionError(f"{k} stored twice ({name})")
            out[k] = v
    return out


def _check_against(
    on_disk: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], what: str
) -> None:
    for k, v in on_disk.items():
        if k not in expected:
            raise AssertionError(f"{what}: {k} is on disk but not in the tool's state_dict")
        ref = expected[k]
        if v.dtype != ref.dtype or v.shape != ref.shape or not torch.equal(v, ref):
            raise AssertionError(f"{what}: {k} on disk differs from the tool's tensor")


def _sharded_entries(folder: Path, index_name: str, sd: dict[str, torch.Tensor]) -> dict[str, Any]:
    index = json.loads((folder / index_name).read_text())
    weight_map: dict[str, str] = index["weight_map"]
    shards = sorted(set(weight_map.values()))
    on_disk = _files_tensors(folder, shards)
    if set(on_disk) != set(weight_map):
        raise AssertionError(f"weight_map {sorted(weight_map)} != stored {sorted(on_disk)}")
    _check_against(on_disk, sd, index_name)
    return {
        "tensors": {k: tensor_entry(sd[k]) for k in on_disk},
        "omitted_tied": sorted(set(sd) - set(on_disk)),
        "shards": shards,
        "index_metadata": index["metadata"],
    }


def case_gpt2_sharded(out: Path) -> dict[str, Any]:
    model = _gpt2()
    folder = fresh_dir(out / "gpt2_sharded")
    model.save_pretrained(folder, max_shard_size="40KB")
    sd = model.state_dict()
    info = _sharded_entries(folder, "model.safetensors.index.json", sd)
    if len(info["shards"]) < 3:
        raise AssertionError(f"only {len(info['shards'])} shards")
    if info["omitted_tied"] != ["lm_head.weight"]:
        raise AssertionError(f"unexpected omitted names {info['omitted_tied']}")
    return {
        "gpt2_sharded": {"path": "gpt2_sharded", "family": "hf-sharded", "kind": "model"} | info
    }


def case_llama_single(out: Path) -> dict[str, Any]:
    model = _llama()
    folder = fresh_dir(out / "llama_single")
    model.save_pretrained(folder)
    if not (folder / "model.safetensors").is_file() or not (folder / "config.json").is_file():
        raise AssertionError(f"unexpected layout {sorted(os.listdir(folder))}")
    if any(n.endswith(".index.json") for n in os.listdir(folder)):
        raise AssertionError("unsharded save wrote an index")
    sd = model.state_dict()
    on_disk = _files_tensors(folder, ["model.safetensors"])
    _check_against(on_disk, sd, "model.safetensors")
    if set(on_disk) != set(sd):
        raise AssertionError(f"names differ: {sorted(set(sd) ^ set(on_disk))}")
    return {
        "llama_single": {
            "path": "llama_single",
            "family": "hf-single",
            "kind": "model",
            "tensors": {k: tensor_entry(sd[k]) for k in on_disk},
        }
    }


def case_lora(out: Path) -> dict[str, Any]:
    import peft
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    base = _llama()
    torch.manual_seed(2)
    pm = get_peft_model(
        base,
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    folder = fresh_dir(out / "llama_lora")
    pm.save_pretrained(str(folder))
    expected = get_peft_model_state_dict(pm)
    on_disk = _files_tensors(folder, ["adapter_model.safetensors"])
    _check_against(on_disk, expected, "adapter_model.safetensors")
    if set(on_disk) != set(expected) or not (folder / "adapter_config.json").is_file():
        raise AssertionError("adapter files do not match get_peft_model_state_dict")
    cfg = json.loads((folder / "adapter_config.json").read_text())
    return {
        "llama_lora": {
            "path": "llama_lora",
            "family": "peft-adapter",
            "kind": "adapter",
            "tensors": {k: tensor_entry(expected[k]) for k in on_disk},
            # extra key: a few adapter_config.json fields as written (target_modules order varies)
            "adapter_config": {
                k: cfg[k] for k in ("peft_type", "r", "lora_alpha", "target_modules")
            },
            "writer": f"peft {peft.__version__}",
        }
    }


def _tf4_child(folder: Path, result_path: Path) -> None:
    """Runs under transformers 4.51.3 (side folder first on PYTHONPATH)."""
    import transformers

    model = _gpt2()
    model.save_pretrained(folder, safe_serialization=False, max_shard_size="40KB")
    sd = model.state_dict()
    info = _sharded_entries(folder, "pytorch_model.bin.index.json", sd)
    # lm_head.weight stays in the .bin shard next to transformer.wte.weight, sharing its storage.
    shard = (
        folder
        / json.loads((folder / "pytorch_model.bin.index.json").read_text())["weight_map"][
            "lm_head.weight"
        ]
    )
    loaded = torch.load(shard, map_location="cpu", weights_only=True)
    info["tied_share_storage"] = bool(
        "transformer.wte.weight" in loaded
        and loaded["lm_head.weight"].untyped_storage().data_ptr()
        == loaded["transformer.wte.weight"].untyped_storage().data_ptr()
    )
    info["writer"] = f"transformers {transformers.__version__}"
    result_path.write_text(json.dumps(info))


def case_bin_sharded(out: Path) -> dict[str, Any]:
    side = Path(os.environ.get("TF4_SIDE_DIR", Path(sys.prefix) / "side" / "transformers4"))
    if not (side / "transformers").is_dir():
        raise FileNotFoundError(f"transformers 4 side folder not found at {side}")
    folder = fresh_dir(out / "gpt2_bin_sharded")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(side), *filter(None, [env.get("PYTHONPATH")])])
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            TF4_CHILD_FLAG,
            str(folder),
            str(result),
        ]
        subprocess.run(cmd, env=env, check=True, timeout=300)
        info = json.loads(result.read_text())
    if not info["writer"].startswith("transformers 4."):
        raise AssertionError(f"child ran {info['writer']}")
    if len(info["shards"]) < 3 or not all(s.endswith(".bin") for s in info["shards"]):
        raise AssertionError(f"unexpected shards {info['shards']}")
    return {
        "gpt2_bin_sharded": {"path": "gpt2_bin_sharded", "family": "hf-sharded", "kind": "model"}
        | info
    }


CASES = {
    "gpt2_sharded": case_gpt2_sharded,
    "llama_single": case_llama_single,
    "gpt2_bin_sharded": case_bin_sharded,
    "llama_lora": case_lora,
}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == TF4_CHILD_FLAG:
        _tf4_child(Path(sys.argv[2]), Path(sys.argv[3]))
        sys.exit(0)
    out_dir = main_out_dir(sys.argv)
    import transformers

    sys.exit(run_maker(out_dir, "transformers", transformers.__version__, CASES))
