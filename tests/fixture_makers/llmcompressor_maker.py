"""compressed-tensors exports written by llm-compressor with its ``mse`` weight observer, which
shrinks each group's range below min-max and clips the values past it, with faults.

Usage: ``python tests/fixture_makers/llmcompressor_maker.py OUT_DIR`` (llm-compressor is imported
from ``.venv/side/llmcompressor``, see scripts/setup_env.sh: it pins other transformers and
compressed-tensors versions, so it is installed there without its dependencies and runs on the
main environment's).

``hf`` is the source (``_llama_models.tiny_llama``).

* ``oneshot(model, recipe=QuantizationModifier(config_groups=...))`` on CPU, data-free (weights
  only), every Linear but ``lm_head``: ``ct_mse`` (int4 symmetric, groups of 32, pack-quantized,
  ``observer: mse``) and ``ct_mse_asym`` (the same, asymmetric). As written, ``config.json``
  names the observer and ``recipe.yaml`` holds the modifier.
* ``ct_mse_bare``: ``ct_mse`` as a writer that records neither would leave it: no
  ``recipe.yaml``, no ``observer`` in ``config.json``; ``ct_mse_asym_bare`` likewise;
  ``ct_mse_recipe``: no ``observer`` in ``config.json``, ``recipe.yaml`` kept (it names it).
* Oracle: transformers' ``from_pretrained(..., CompressedTensorsConfig(dequantize=True))``
  state_dict of ``ct_mse`` and ``ct_mse_asym``, saved as ``<case>.oracle.safetensors``.
* faults on ``ct_mse_bare``: ``fault_mse_scale`` (``layers.1.self_attn.o_proj``: row 5, group 1:
  its scale times 2), ``fault_mse_layers`` (layers 0 and 1 ``mlp.up_proj`` parts
  swapped), ``fault_mse_shrunk`` (``ct_mse``'s scales, but ``layers.0.self_attn.v_proj``
  quantized by compressed-tensors with 0.4 times its min-max scale, no observer recorded).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from _llama_models import tiny_llama
from _manifest import main_out_dir, run_maker, side_folder

SCHEMES = {"ct_mse": True, "ct_mse_asym": False}  # case -> symmetric


def _case(path: str, **extra: Any) -> dict[str, Any]:
    return {"path": path, "family": "hf-quantized", "kind": "model", **extra}


def exports(out: Path) -> dict[str, Any]:
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM

    cases: dict[str, Any] = {"hf": tiny_llama(out / "hf")}
    for case, symmetric in SCHEMES.items():
        model = AutoModelForCausalLM.from_pretrained(out / "hf", dtype=torch.float32)
        args = QuantizationArgs(
            num_bits=4,
            type="int",
            symmetric=symmetric,
            strategy="group",
            group_size=32,
            observer="mse",
        )
        scheme = QuantizationScheme(targets=["Linear"], weights=args)
        modifier = QuantizationModifier(config_groups={"group_0": scheme}, ignore=["lm_head"])
        oneshot(model=model, recipe=modifier, output_dir=str(out / case))
        del model
        assert (out / case / "recipe.yaml").is_file()
        assert _observers(out / case) == ["mse"]
        _oracle(out, case)
        cases[case] = _case(case, oracle=f"{case}.oracle.safetensors", observer="mse")
    return cases


def _observers(folder: Path) -> list[Any]:
    q = json.loads((folder / "config.json").read_text())["quantization_config"]
    return [g["weights"].get("observer") for g in q["config_groups"].values()]


def _oracle(out: Path, case: str) -> None:
    """transformers + compressed-tensors' own decompression of the export."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    model = AutoModelForCausalLM.from_pretrained(
        out / case, quantization_config=CompressedTensorsConfig(dequantize=True)
    )
    state = {k: v.detach().float().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(state, str(out / f"{case}.oracle.safetensors"))


def _unrecorded(src: Path, dst: Path, keep_recipe: bool) -> None:
    """``src`` with ``observer`` dropped from config.json (and recipe.yaml unless kept)."""
    shutil.copytree(src, dst)
    if not keep_recipe:
        (dst / "recipe.yaml").unlink()
    doc = json.loads((dst / "config.json").read_text())
    for group in doc["quantization_config"]["config_groups"].values():
        del group["weights"]["observer"]
    (dst / "config.json").write_text(json.dumps(doc, indent=2))


def unrecorded(out: Path) -> dict[str, Any]:
    _unrecorded(out / "ct_mse", out / "ct_mse_bare", keep_recipe=False)
    _unrecorded(out / "ct_mse_asym", out / "ct_mse_asym_bare", keep_recipe=False)
    _unrecorded(out / "ct_mse", out / "ct_mse_recipe", keep_recipe=True)
    return {
        "ct_mse_bare": _case("ct_mse_bare", observer=None),
        "ct_mse_asym_bare": _case("ct_mse_asym_bare", observer=None),
        "ct_mse_recipe": _case("ct_mse_recipe", observer="recipe.yaml"),
    }


def _rewrite(src: Path, dst: Path, change: Any) -> None:
    """``src`` copied to ``dst`` with each stored tensor passed through ``change(name, t)``."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    shutil.copytree(src, dst)
    with safe_open(str(src / "model.safetensors"), "pt") as f:
        meta = f.metadata()
        state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    save_file(
        {k: change(k, v, state).contiguous() for k, v in state.items()},
        str(dst / "model.safetensors"),
        metadata=meta,
    )


def faults(out: Path) -> dict[str, Any]:
    o_proj = "model.layers.1.self_attn.o_proj"

    def times2(name: str, t: torch.Tensor, state: Any) -> torch.Tensor:
        if name != f"{o_proj}.weight_scale":
            return t
        t = t.clone()
        t[5, 1] *= 2  # row 5, group 1
        return t

    up = ("model.layers.0.mlp.up_proj.", "model.layers.1.mlp.up_proj.")

    def swap(name: str, t: torch.Tensor, state: Any) -> torch.Tensor:
        for a, b in (up, up[::-1]):
            if name.startswith(a):
                return state[b + name[len(a) :]]
        return t

    _rewrite(out / "ct_mse_bare", out / "fault_mse_scale", times2)
    _rewrite(out / "ct_mse_bare", out / "fault_mse_layers", swap)
    _shrunk(out, SHRUNK, out / "fault_mse_shrunk")
    return {
        "fault_mse_shrunk": _case("fault_mse_shrunk", fault=f"{SHRUNK}.weight"),
        "fault_mse_scale": _case("fault_mse_scale", fault=f"{o_proj}.weight"),
        "fault_mse_layers": _case(
            "fault_mse_layers",
            fault="model.layers.0.mlp.up_proj.weight",
            also="model.layers.1.mlp.up_proj.weight",
        ),
    }


SHRUNK = "model.layers.0.self_attn.v_proj"


def _shrunk(out: Path, wrong: str, folder: Path) -> None:
    """``ct_mse``'s scales written again by compressed-tensors (``apply_quantization_config``,
    ``ModelCompressor.compress_model``, ``save_pretrained``, ``update_config``: no observer
    recorded), but ``wrong`` quantized with 0.4 times its min-max scale (``calculate_qparams``):
    clipped far past what the MSE search reaches (0.8 by default)."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
        apply_quantization_config,
    )
    from compressed_tensors.quantization.utils import calculate_qparams
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    stored = load_file(str(out / "ct_mse" / "model.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(out / "hf", dtype=torch.float32)
    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    qc = QuantizationConfig(
        config_groups={"group_0": scheme}, ignore=["lm_head"], format="pack-quantized"
    )
    apply_quantization_config(model, qc)
    for name, m in model.named_modules():
        if not hasattr(m, "weight_scale"):
            continue
        if name == wrong:
            g = m.weight.data.reshape(m.weight.shape[0], -1, 32)
            scale = calculate_qparams(g.amin(-1), g.amax(-1), args)[0] * 0.4
        else:
            scale = stored[f"{name}.weight_scale"]
        m.weight_scale.data = scale.to(m.weight_scale.dtype).reshape(m.weight_scale.shape)
        if hasattr(m, "weight_zero_point"):
            m.weight_zero_point.data.zero_()
    compressor = ModelCompressor.from_pretrained_model(model, "pack-quantized")
    assert compressor is not None
    compressor.compress_model(model)
    model.save_pretrained(folder)
    compressor.update_config(str(folder))
    assert _observers(folder) == [None] and not (folder / "recipe.yaml").exists()


if __name__ == "__main__":
    from importlib.metadata import version

    # llm-compressor pins transformers / compressed-tensors versions other than the main
    # environment's: it lives in a side folder, installed without its dependencies
    sys.path.insert(0, side_folder("llmcompressor", "LLMCOMPRESSOR_SIDE_DIR", "llmcompressor"))

    versions = "; ".join(
        f"{p} {version(p)}" for p in ("llmcompressor", "compressed-tensors", "transformers")
    )
    sys.exit(
        run_maker(
            main_out_dir(sys.argv),
            "llm-compressor (mse observer)",
            versions,
            {"exports": exports, "unrecorded": unrecorded, "faults": faults},
        )
    )
