"""GPTQ and AWQ exports written on CPU by the real tools (tests/fixture_makers/gptq_maker.py:
GPTQModel 7.7.0, AutoAWQ 0.2.9): each weight listed once with its scheme, and its values equal
to the tools' own dequantizers (GPTQModel's ``dequantize_model`` in float32, bit for bit;
AutoAWQ's ``dequantize_gemm`` in float16, bit for bit once ours, computed in float32, is
rounded to float16 as that function's last multiply rounds it)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.errors import CkptExplorerError

GPTQ = ("gptq_4bit", "gptq_3bit", "gptq_8bit", "gptq_4bit_static", "gptq_v2", "gptq_legacy_config")
LABELS = {
    "gptq_4bit": "int4/group32",
    "gptq_3bit": "int3/group32",
    "gptq_8bit": "int8/channel",
    "gptq_4bit_static": "int4/group32",
    "gptq_v2": "int3/group32",
    "gptq_legacy_config": "int4/group32",
    "awq_gemm": "int4/group64",
}
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def made(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    out, manifest = real_checkpoints("gptq")
    return out, manifest["cases"]


def _linear_names() -> list[str]:
    return [
        f"model.layers.{i}.{'self_attn' if p[0] in 'qkvo' else 'mlp'}.{p}.weight"
        for i in range(2)
        for p in LINEAR
    ]


@pytest.mark.parametrize("case", [*GPTQ, "awq_gemm"])
def test_each_weight_listed_once_with_its_scheme(made: Any, case: str) -> None:
    out, cases = made
    view = open_checkpoint(out / cases[case]["path"])
    source = open_checkpoint(out / "hf")
    assert view.family == "hf-quantized" and view.kind == "model"
    assert sorted(view.names()) == sorted(source.names())  # qweight/qzeros/scales/g_idx folded
    by_name = {r.name: r for r in view.tensors}
    for name in _linear_names():
        assert by_name[name].dtype == LABELS[case], name
        assert tuple(by_name[name].shape) == tuple(source.record(name).shape)
    weights = view.values["__metadata__.quantization"]["weights"]
    assert sorted(weights) == sorted(_linear_names())
    roles = {"qweight", "qzeros", "scales"} | ({"g_idx"} if case != "awq_gemm" else set())
    assert all(set(w["parts"]) == roles for w in weights.values())


@pytest.mark.parametrize("case", GPTQ[:-1])
def test_gptq_values_equal_gptqmodel_dequantizer(made: Any, case: str) -> None:
    out, cases = made
    view = open_checkpoint(out / cases[case]["path"])
    oracle = load_file(str(out / f"{case}.oracle.safetensors"))
    for name in _linear_names():
        ours = view.load(name)
        assert ours.dtype == oracle[name].dtype == torch.float32
        assert torch.equal(ours, oracle[name]), name


def test_v2_and_legacy_configs_read_the_same_weights(made: Any) -> None:
    """gptq_v2 stores zeros as they are, v1 minus one; quantize_config.json alone suffices."""
    out, _ = made
    v1, v2 = open_checkpoint(out / "gptq_3bit"), open_checkpoint(out / "gptq_v2")
    plain, legacy = open_checkpoint(out / "gptq_4bit"), open_checkpoint(out / "gptq_legacy_config")
    assert (
        load_file(str(out / "gptq_v2/model.safetensors"))["model.layers.0.mlp.up_proj.qzeros"]
        .ne(
            load_file(str(out / "gptq_3bit/model.safetensors"))["model.layers.0.mlp.up_proj.qzeros"]
        )
        .any()
    )
    for name in _linear_names():
        assert torch.equal(v1.load(name), v2.load(name)), name
        assert torch.equal(plain.load(name), legacy.load(name)), name


def test_awq_values_equal_autoawq_dequantize_gemm(made: Any) -> None:
    out, cases = made
    view = open_checkpoint(out / cases["awq_gemm"]["path"])
    oracle = load_file(str(out / "awq_gemm.oracle.safetensors"))
    for name in _linear_names():
        ours = view.load(name)
        assert ours.dtype == torch.float32 and oracle[name].dtype == torch.float16
        assert torch.equal(ours.half(), oracle[name]), name
        assert not torch.equal(ours, ours.half().float())  # ours keeps what float16 rounds off


def test_g_idx_out_of_range_is_an_error_not_garbage(made: Any, tmp_path: Path) -> None:
    out, _ = made
    folder = tmp_path / "bad"
    shutil.copytree(out / "gptq_4bit", folder)
    state = load_file(str(folder / "model.safetensors"))
    state["model.layers.0.self_attn.q_proj.g_idx"][3] = 99
    save_file(state, str(folder / "model.safetensors"), {"format": "pt"})
    view = open_checkpoint(folder)
    with pytest.raises(CkptExplorerError):
        view.load("model.layers.0.self_attn.q_proj.weight")
    assert view.load("model.layers.0.self_attn.k_proj.weight").shape == (64, 128)


def test_config_bits_that_disagree_with_the_parts_are_found(made: Any, tmp_path: Path) -> None:
    """A config saying 8-bit over 4-bit codes: every part's size disagrees (validate errors)."""
    import json

    from ckpt_explorer.readers.quantized.checks import RULE_PARTS
    from ckpt_explorer.validate import validate_checkpoint

    out, _ = made
    folder = tmp_path / "wrong_bits"
    shutil.copytree(out / "gptq_4bit", folder)
    doc = json.loads((folder / "config.json").read_text())
    doc["quantization_config"]["bits"] = 8
    (folder / "config.json").write_text(json.dumps(doc))
    report = validate_checkpoint(folder, numeric=False)
    bad = sorted({f.tensor for f in report.findings if f.rule == RULE_PARTS})
    assert bad == sorted(_linear_names()) and not report.ok
    assert validate_checkpoint(out / "gptq_4bit", numeric=False).ok
