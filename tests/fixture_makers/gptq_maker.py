"""GPTQ and AWQ exports of one tiny Llama, quantized on CPU by the real tools, with faults.

Usage: ``python tests/fixture_makers/gptq_maker.py OUT_DIR`` (GPTQModel and AutoAWQ are
imported from ``.venv/side/gptq``, see scripts/setup_env.sh).

``hf`` is the source (``_llama_models.tiny_llama`` with its word-level tokenizer: the tools need one).

* GPTQModel (``GPTQModel.load(hf, QuantizeConfig(...))``, ``quantize`` on 16 random token
  sequences, ``save``; legacy ``gptq`` checkpoint format: zeros stored minus one):
  ``gptq_4bit`` (4-bit, groups of 32, ``desc_act``, symmetric), ``gptq_3bit`` (3-bit, groups
  of 32, asymmetric: values straddle int32 words), ``gptq_8bit`` (8-bit, one group per row:
  ``group_size -1``), ``gptq_4bit_static`` (4-bit, groups of 32, no ``desc_act``, symmetric).
  ``gptq_v2``: ``gptq_3bit`` converted to the ``gptq_v2`` checkpoint format by GPTQModel's own
  ``convert_gptq_v1_to_v2`` zero correction (zeros stored as they are);
  ``gptq_legacy_config``: ``gptq_4bit`` with its config in ``quantize_config.json`` only.
  Oracle: GPTQModel's offline dequantizer (``gptqmodel.utils.model_dequant.dequantize_model``,
  float32) saved as ``<case>.oracle.safetensors``.
* AutoAWQ (``AutoAWQForCausalLM.quantize`` on CPU, ``save_quantized``): ``awq_gemm`` (4-bit,
  groups of 64, zero point, GEMM layout). Oracle: AutoAWQ's ``dequantize_gemm`` (float16).
* ``ct_gptq``: a compressed-tensors pack-quantized export (no ``recipe.yaml``) of GPTQ-moved
  weights: ``gptq_4bit_static``'s dequantized weights and scales given to compressed-tensors'
  ``apply_quantization_config`` / ``ModelCompressor.compress_model`` / ``save_pretrained``.
* faults: ``fault_gptq_scale`` (``gptq_4bit``, layers.1.self_attn.o_proj: one group's scale
  of one output row times 2), ``fault_gptq_layers`` (``gptq_4bit``: layers 0 and 1
  mlp.up_proj parts swapped), ``fault_gptq_gidx`` (``gptq_4bit_static``: layers.0.
  self_attn.q_proj g_idx shuffled), ``fault_gptq_gidx_act`` (``gptq_4bit``, desc_act:
  layers.0.self_attn.k_proj g_idx shuffled), ``fault_awq_scale`` (``awq_gemm``, layers.1.mlp.down_proj:
  one scale times 2).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from _llama_models import VOCAB, tiny_llama
from _manifest import main_out_dir, run_maker, side_folder


def _calib() -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(1, VOCAB, (64,), generator=g).tolist() for _ in range(16)]


def source(out: Path) -> dict[str, Any]:
    return {"hf": tiny_llama(out / "hf", tokenizer=True)}


GPTQ_CASES = {  # case -> (bits, group_size, desc_act, sym)
    "gptq_4bit": (4, 32, True, True),
    "gptq_3bit": (3, 32, False, False),
    "gptq_8bit": (8, -1, False, True),
    "gptq_4bit_static": (4, 32, False, True),
}


def _gptq_oracle(out: Path, case: str) -> None:
    from gptqmodel.utils.model_dequant import dequantize_model
    from safetensors.torch import load_file, save_file

    tmp = out / f"{case}.oracle.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    dequantize_model(out / case, tmp, target_dtype=torch.float32)
    state: dict[str, torch.Tensor] = {}
    for f in sorted(tmp.glob("*.safetensors")):
        state.update(load_file(str(f)))
    save_file(state, str(out / f"{case}.oracle.safetensors"))
    shutil.rmtree(tmp)


def gptq(out: Path) -> dict[str, Any]:
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")
    os.chdir(out)  # GPTQModel writes its quantization logs under ./logs
    from gptqmodel import GPTQModel, QuantizeConfig

    calib = [
        {
            "input_ids": torch.tensor([ids]),
            "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        }
        for ids in _calib()
    ]
    cases: dict[str, Any] = {}
    for case, (bits, gs, desc_act, sym) in GPTQ_CASES.items():
        if not (out / f"{case}.oracle.safetensors").is_file():  # (a rerun into the same folder)
            config = QuantizeConfig(
                bits=bits,
                group_size=gs,
                desc_act=desc_act,
                sym=sym,
                act_group_aware=False,
                offload_to_disk=False,
            )
            model = GPTQModel.load(str(out / "hf"), config, device="cpu")
            model.quantize(calib, batch_size=1)
            model.save(str(out / case))
            del model
            (out / case / "quant_log.csv").unlink(missing_ok=True)
            _gptq_oracle(out, case)
        cases[case] = _case(case, bits=bits, group_size=gs, desc_act=desc_act, sym=sym)
    _v2(out, "gptq_3bit", "gptq_v2")
    _gptq_oracle(out, "gptq_v2")
    cases["gptq_v2"] = _case("gptq_v2", bits=3, group_size=32, desc_act=False, sym=False)
    shutil.rmtree(out / "logs", ignore_errors=True)
    legacy = out / "gptq_legacy_config"
    shutil.copytree(out / "gptq_4bit", legacy)
    doc = json.loads((legacy / "config.json").read_text())
    del doc["quantization_config"]  # AutoGPTQ-era folders: quantize_config.json only
    (legacy / "config.json").write_text(json.dumps(doc, indent=2))
    cases["gptq_legacy_config"] = _case("gptq_legacy_config", bits=4, group_size=32)
    return cases


def _v2(out: Path, src: str, dst: str) -> None:
    """``src`` rewritten in the ``gptq_v2`` checkpoint format by GPTQModel's own zero shift."""
    from gptqmodel.utils.model_dequant import _correct_gptq_v1_qzeros

    bits = GPTQ_CASES[src][0]
    _rewrite(
        out / src,
        out / dst,
        lambda name, t: _correct_gptq_v1_qzeros(t, bits) if name.endswith(".qzeros") else t,
    )
    for name in ("config.json", "quantize_config.json"):
        path = out / dst / name
        doc = json.loads(path.read_text())
        q = doc.get("quantization_config", doc)
        q["checkpoint_format"] = "gptq_v2"
        q["format"] = "gptq_v2"
        path.write_text(json.dumps(doc, indent=2))


def _case(path: str, **extra: Any) -> dict[str, Any]:
    return {"path": path, "family": "hf-quantized", "kind": "model", **extra}


def _rewrite(src: Path, dst: Path, change: Any) -> None:
    """``src`` copied to ``dst`` with each stored tensor passed through ``change(name, t)``."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst, dirs_exist_ok=True)
    for f in dst.glob("*.safetensors"):
        state = load_file(str(f))
        save_file(
            {k: change(k, v).contiguous() for k, v in state.items()}, str(f), {"format": "pt"}
        )


def awq(out: Path) -> dict[str, Any]:
    from awq import AutoAWQForCausalLM
    from awq.utils.packing_utils import dequantize_gemm
    from safetensors.torch import load_file, save_file

    model = AutoAWQForCausalLM.from_pretrained(str(out / "hf"), device_map="cpu")
    tok: Any = None
    shutil.rmtree(out / "awq_gemm", ignore_errors=True)
    model.quantize(
        tok,
        quant_config={"zero_point": True, "q_group_size": 64, "w_bit": 4, "version": "GEMM"},
        calib_data=_calib(),
        max_calib_seq_len=64,
        max_calib_samples=16,
    )
    model.save_quantized(str(out / "awq_gemm"))
    stored = load_file(str(out / "awq_gemm" / "model.safetensors"))
    oracle = {
        m[: -len(".qweight")] + ".weight": dequantize_gemm(
            t,
            stored[m.replace(".qweight", ".qzeros")],
            stored[m.replace(".qweight", ".scales")],
            4,
            64,
        )
        .t()
        .contiguous()
        for m, t in stored.items()
        if m.endswith(".qweight")
    }
    save_file(oracle, str(out / "awq_gemm.oracle.safetensors"))
    return {"awq_gemm": _case("awq_gemm", bits=4, group_size=64)}


def ct_gptq(out: Path) -> dict[str, Any]:
    """GPTQ-moved weights written by compressed-tensors as pack-quantized int4, no recipe."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
        QuantizationStatus,
        apply_quantization_config,
    )
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    dq = load_file(str(out / "gptq_4bit_static.oracle.safetensors"))
    stored = load_file(str(out / "gptq_4bit_static" / "model.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(out / "hf", torch_dtype=torch.float32)
    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    qconfig = QuantizationConfig(
        config_groups={"group_0": scheme},
        ignore=["lm_head"],
        quantization_status=QuantizationStatus.FROZEN,
        format="pack-quantized",
    )
    apply_quantization_config(model, qconfig)
    with torch.no_grad():
        for name, module in model.named_modules():
            if f"{name}.qweight" not in stored:
                continue
            module.weight.copy_(dq[f"{name}.weight"])
            module.weight_scale.copy_(stored[f"{name}.scales"].t().float())
            module.weight_zero_point.zero_()
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="pack-quantized")
    assert compressor is not None
    compressor.compress_model(model)
    model.save_pretrained(out / "ct_gptq")
    compressor.update_config(str(out / "ct_gptq"))
    assert not (out / "ct_gptq" / "recipe.yaml").exists()
    return {"ct_gptq": _case("ct_gptq", bits=4, group_size=32)}


def _times2(t: torch.Tensor, index: tuple[int, ...]) -> torch.Tensor:
    t = t.clone()
    t[index] *= 2
    return t


def faults(out: Path) -> dict[str, Any]:
    scale = "model.layers.1.self_attn.o_proj.scales"
    _rewrite(
        out / "gptq_4bit",
        out / "fault_gptq_scale",
        lambda n, t: _times2(t, (1, 5)) if n == scale else t,
    )
    up = ("model.layers.0.mlp.up_proj.", "model.layers.1.mlp.up_proj.")
    from safetensors.torch import load_file

    src = load_file(str(out / "gptq_4bit" / "model.safetensors"))

    def swap(n: str, t: torch.Tensor) -> torch.Tensor:
        for a, b in (up, up[::-1]):
            if n.startswith(a):
                return src[b + n[len(a) :]]
        return t

    _rewrite(out / "gptq_4bit", out / "fault_gptq_layers", swap)
    gidx = "model.layers.0.self_attn.q_proj.g_idx"
    g = torch.Generator().manual_seed(3)
    _rewrite(
        out / "gptq_4bit_static",
        out / "fault_gptq_gidx",
        lambda n, t: t[torch.randperm(t.numel(), generator=g)] if n == gidx else t,
    )
    act_idx = "model.layers.0.self_attn.k_proj.g_idx"
    _rewrite(
        out / "gptq_4bit",
        out / "fault_gptq_gidx_act",
        lambda n, t: t[torch.randperm(t.numel(), generator=g)] if n == act_idx else t,
    )
    awq_scale = "model.layers.1.mlp.down_proj.scales"
    _rewrite(
        out / "awq_gemm",
        out / "fault_awq_scale",
        lambda n, t: _times2(t, (1, 7)) if n == awq_scale else t,
    )
    return {
        "fault_gptq_scale": _case(
            "fault_gptq_scale", fault="model.layers.1.self_attn.o_proj.weight"
        ),
        "fault_gptq_layers": _case(
            "fault_gptq_layers",
            fault="model.layers.0.mlp.up_proj.weight",
            also="model.layers.1.mlp.up_proj.weight",
        ),
        "fault_gptq_gidx": _case("fault_gptq_gidx", fault="model.layers.0.self_attn.q_proj.weight"),
        "fault_gptq_gidx_act": _case(
            "fault_gptq_gidx_act", fault="model.layers.0.self_attn.k_proj.weight"
        ),
        "fault_awq_scale": _case("fault_awq_scale", fault="model.layers.1.mlp.down_proj.weight"),
    }


if __name__ == "__main__":
    from importlib.metadata import version

    # GPTQModel and AutoAWQ live in a side folder (scripts/setup_env.sh): peft imports awq
    # whenever it can, and AutoAWQ breaks that import under transformers 4
    sys.path.insert(0, side_folder("gptqmodel", "GPTQ_SIDE_DIR", "gptq"))

    versions = "; ".join(
        f"{p} {version(p)}" for p in ("gptqmodel", "autoawq", "compressed-tensors", "transformers")
    )
    sys.exit(
        run_maker(
            main_out_dir(sys.argv),
            "GPTQModel, AutoAWQ, compressed-tensors",
            versions,
            {"source": source, "gptq": gptq, "awq": awq, "ct_gptq": ct_gptq, "faults": faults},
        )
    )
