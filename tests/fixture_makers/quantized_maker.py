"""Quantized safetensors exports of one tiny Llama, written by the real tools, with faults.

Usage: ``python tests/fixture_makers/quantized_maker.py OUT_DIR``

Cases (``hf`` is the source: ``_llama_models.tiny_llama``, norms away from 1):

* compressed-tensors (its own ``apply_quantization_config``, ``calculate_qparams`` on each
  weight's min/max as its min-max observer does, ``ModelCompressor.compress_model``,
  ``save_pretrained`` and ``update_config``; llm-compressor itself would downgrade
  transformers): ``ct_w4a16`` (int4 symmetric, groups of 32, pack-quantized), ``ct_w4_asym``
  (int4 asymmetric with packed zero points, groups of 32), ``ct_w8a8`` (int8 per channel,
  int-quantized), ``ct_fp8`` (FP8 e4m3 per tensor, float-quantized), ``ct_fp8_block`` (FP8
  128x128 blocks), ``ct_fp8_static`` (FP8 weights and static per-tensor FP8 input scales,
  ``input_scale`` set to a fixed range where calibration would measure one). transformers' ``from_pretrained(..., CompressedTensorsConfig(
  dequantize=True))`` state_dict is saved as ``<case>.oracle.safetensors``.
* bitsandbytes through transformers' ``BitsAndBytesConfig`` on CPU: ``bnb_nf4`` (double
  quant), ``bnb_fp4``, ``bnb_int8``.
* FP8 the way DeepSeek-V3 ships it: ``fp8_block`` (e4m3) and ``fp8_e5m2``, each Linear of the
  layers as float8 with a float32 ``weight_scale_inv`` per 128x128 block (scale = block
  max|x| / fp8 max), ``quantization_config`` {quant_method: fp8, weight_block_size};
  transformers' ``FineGrainedFP8Config(dequantize=True)`` reading saved as
  ``<case>.oracle.safetensors`` (``oracle_error`` where it cannot read the case).
* faults: ``fault_scale`` (ct W4A16 with ``layers.1.self_attn.o_proj`` quantized by the tool
  with twice its scale), ``fault_norm`` (``ct_w4a16`` with ``layers.0.post_attention_layernorm``
  times 1.5), ``fault_rows`` (``ct_w8a8`` with rows 3 and 5 of ``layers.0.mlp.gate_proj``
  swapped, values and scales), ``fault_block`` (``fp8_block`` with one block scale doubled).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from _llama_models import tiny_llama
from _manifest import main_out_dir, run_maker


def _source(out: Path) -> dict[str, Any]:
    return {"hf": tiny_llama(out / "hf")}


def _ct(
    out: Path,
    case: str,
    weights: dict[str, Any],
    fmt: str,
    wrong: str = "",
    inputs: dict[str, Any] | None = None,
) -> None:
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
        apply_quantization_config,
    )
    from compressed_tensors.quantization.utils import calculate_qparams
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out / "hf", dtype=torch.float32)
    args = QuantizationArgs(**weights)
    scheme = QuantizationScheme(
        targets=["Linear"],
        weights=args,
        input_activations=QuantizationArgs(**inputs) if inputs else None,
    )
    qc = QuantizationConfig(config_groups={"group_0": scheme}, ignore=["lm_head"], format=fmt)
    apply_quantization_config(model, qc)
    for name, m in model.named_modules():
        if not hasattr(m, "weight_scale"):
            continue
        w = m.weight.data
        if args.strategy == "group":
            g = w.reshape(w.shape[0], -1, args.group_size)
            lo, hi = g.amin(-1), g.amax(-1)
        elif args.strategy == "channel":
            lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
        elif args.strategy == "block":
            b = _blocks(w, *args.block_structure)  # zero padding: min/max keep 0 anyway
            lo, hi = b.amin((1, 3)), b.amax((1, 3))
        else:
            lo, hi = w.min().reshape(1), w.max().reshape(1)
        scale, zp = calculate_qparams(lo, hi, args)
        if name == wrong:
            scale = scale * 2
        m.weight_scale.data = scale.to(m.weight_scale.dtype).reshape(m.weight_scale.shape)
        if hasattr(m, "input_scale"):  # what calibration would set: a fixed activation range
            m.input_scale.data = torch.full_like(m.input_scale, 4.0 / 448)
        if hasattr(m, "weight_zero_point"):
            m.weight_zero_point.data = zp.to(m.weight_zero_point.dtype).reshape(
                m.weight_zero_point.shape
            )
    compressor = ModelCompressor.from_pretrained_model(model, fmt)
    compressor.compress_model(model)
    model.save_pretrained(out / case)
    compressor.update_config(out / case)
    _ct_oracle(out, case)


def _ct_oracle(out: Path, case: str) -> None:
    """transformers + compressed-tensors' own decompression of the export."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    model = AutoModelForCausalLM.from_pretrained(
        out / case, quantization_config=CompressedTensorsConfig(dequantize=True)
    )
    state = {k: v.detach().float().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(state, str(out / f"{case}.oracle.safetensors"))


CT_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "ct_w4a16": (
        {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32, "symmetric": True},
        "pack-quantized",
    ),
    "ct_w4_asym": (
        {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32, "symmetric": False},
        "pack-quantized",
    ),
    "ct_w8a8": (
        {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True},
        "int-quantized",
    ),
    "ct_fp8": (
        {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True},
        "float-quantized",
    ),
    "ct_fp8_block": (
        {
            "num_bits": 8,
            "type": "float",
            "strategy": "block",
            "symmetric": True,
            "block_structure": [128, 128],
        },
        "float-quantized",
    ),
}


def _case(path: str, **extra: Any) -> dict[str, Any]:
    return {"path": path, "family": "hf-quantized", "kind": "model", **extra}


def compressed(out: Path) -> dict[str, Any]:
    cases = _source(out)
    for case, (weights, fmt) in CT_CASES.items():
        _ct(out, case, weights, fmt)
        cases[case] = _case(case, scheme="compressed-tensors", oracle=f"{case}.oracle.safetensors")
    static = {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True}
    _ct(out, "ct_fp8_static", CT_CASES["ct_fp8"][0], "float-quantized", inputs=static)
    cases["ct_fp8_static"] = _case(
        "ct_fp8_static", scheme="compressed-tensors", oracle="ct_fp8_static.oracle.safetensors"
    )
    wrong = "model.layers.1.self_attn.o_proj"
    _ct(out, "fault_scale", CT_CASES["ct_w4a16"][0], "pack-quantized", wrong=wrong)
    cases["fault_scale"] = _case("fault_scale", fault=f"{wrong}.weight")
    norm = "model.layers.0.post_attention_layernorm.weight"
    _rewrite(out / "ct_w4a16", out / "fault_norm", {norm: lambda t: t * 1.5})
    cases["fault_norm"] = _case("fault_norm", fault=norm)
    gate = "model.layers.0.mlp.gate_proj"
    swap = {f"{gate}.{p}": _swap_rows for p in ("weight", "weight_scale")}
    _rewrite(out / "ct_w8a8", out / "fault_rows", swap)
    cases["fault_rows"] = _case("fault_rows", fault=f"{gate}.weight")
    return cases


def _swap_rows(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t[[3, 5]] = t[[5, 3]]
    return t


def _rewrite(src: Path, dst: Path, changes: dict[str, Any]) -> None:
    """A copy of an export folder with some tensors of its model.safetensors changed."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    shutil.copytree(src, dst)
    with safe_open(str(src / "model.safetensors"), "pt") as f:
        meta = f.metadata()
        state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    for name, fn in changes.items():
        state[name] = fn(state[name]).contiguous()
    save_file(state, str(dst / "model.safetensors"), metadata=meta)


def bitsandbytes(out: Path) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    configs = {
        "bnb_nf4": BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float32,
        ),
        "bnb_fp4": BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="fp4", bnb_4bit_compute_dtype=torch.float32
        ),
        "bnb_int8": BitsAndBytesConfig(load_in_8bit=True),
    }
    cases = {}
    for case, cfg in configs.items():
        model = AutoModelForCausalLM.from_pretrained(
            out / "hf", quantization_config=cfg, device_map="cpu", dtype=torch.float32
        )
        model.save_pretrained(out / case)
        cases[case] = _case(case, scheme="bitsandbytes")
    return cases


FP8_MAX = {"e4m3": (torch.float8_e4m3fn, 448.0), "e5m2": (torch.float8_e5m2, 57344.0)}


def _fp8_quant(w: torch.Tensor, fmt: str, block: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3's block quantization: per 128x128 block s = max|x| / fp8 max, q = x / s."""
    dtype, top = FP8_MAX[fmt]
    rows, cols = w.shape
    b = _blocks(w.float(), block, block)
    s = b.abs().amax(dim=(1, 3)) / top
    q = (b / s[:, None, :, None]).to(dtype).reshape(b.shape[0] * block, -1)
    return q[:rows, :cols].contiguous(), s.float()


def _blocks(w: torch.Tensor, bh: int, bw: int) -> torch.Tensor:
    """``w`` zero-padded to whole blocks, as (row blocks, bh, column blocks, bw)."""
    rows, cols = w.shape
    pad = torch.nn.functional.pad(w, (0, -cols % bw, 0, -rows % bh))
    return pad.reshape(pad.shape[0] // bh, bh, pad.shape[1] // bw, bw)


def deepseek_fp8(out: Path) -> dict[str, Any]:
    from safetensors import safe_open
    from safetensors.torch import save_file

    cases = {}
    for case, fmt in (("fp8_block", "e4m3"), ("fp8_e5m2", "e5m2")):
        folder = out / case
        folder.mkdir()
        with safe_open(str(out / "hf" / "model.safetensors"), "pt") as f:
            state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        export: dict[str, torch.Tensor] = {}
        for name, t in state.items():
            if ".layers." in name and name.endswith("proj.weight"):
                q, s = _fp8_quant(t, fmt)
                export[name], export[name + "_scale_inv"] = q, s
            else:
                export[name] = t.to(torch.bfloat16)
        save_file(export, str(folder / "model.safetensors"), metadata={"format": "pt"})
        config = json.loads((out / "hf" / "config.json").read_text())
        config["torch_dtype"] = "bfloat16"
        config["quantization_config"] = {
            "activation_scheme": "dynamic",
            "fmt": fmt,
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
        }
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        cases[case] = _case(case, scheme="fp8", oracle_error=_fp8_oracle(out, case))
    name = "model.layers.1.mlp.down_proj.weight_scale_inv"
    _rewrite(out / "fp8_block", out / "fault_block", {name: _double_first})
    cases["fault_block"] = _case("fault_block", fault=name.removesuffix("_scale_inv"))
    return cases


def _fp8_oracle(out: Path, case: str) -> str | None:
    """transformers' FineGrainedFP8Config(dequantize=True) reading of the export, saved as
    ``<case>.oracle.safetensors``; the error where it cannot read it."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, FineGrainedFP8Config

    try:
        model = AutoModelForCausalLM.from_pretrained(
            out / case, quantization_config=FineGrainedFP8Config(dequantize=True)
        )
    except Exception as e:  # recorded: the test says what transformers could not read
        return f"{type(e).__name__}: {e}"[:500]
    state = {k: v.detach().float().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(state, str(out / f"{case}.oracle.safetensors"))
    return None


def _double_first(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t[0, 0] *= 2
    return t


if __name__ == "__main__":
    from importlib.metadata import version

    versions = "; ".join(
        f"{p} {version(p)}" for p in ("compressed-tensors", "bitsandbytes", "transformers")
    )
    sys.exit(
        run_maker(
            main_out_dir(sys.argv),
            "compressed-tensors, bitsandbytes, DeepSeek-V3 fp8 layout",
            versions,
            {"compressed": compressed, "bitsandbytes": bitsandbytes, "fp8": deepseek_fp8},
        )
    )
