"""GGUF -> HF and the export diff beyond llama: Qwen2 (q/k/v biases), Qwen3 (q/k norms),
Gemma 2 (norms stored as 1 + w, tied embeddings), Phi-3 (fused qkv and gate/up) and Mixtral
(stacked experts), on exports
written by llama.cpp's own converter (tests/fixture_makers/arch_gguf_maker.py, gguf_maker.py).
Oracles: the source HF weights, transformers' from_pretrained(gguf_file=) state dict, and the
converted folder loaded by from_pretrained against the source model's logits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.convert import plan_conversion, run_conversion
from ckpt_explorer.diff import diff_checkpoints
from ckpt_explorer.diff.export_side import export_sides
from ckpt_explorer.diff.quant_budget import BEYOND, budget

gguf = pytest.importorskip("gguf")

ARCHS = ("qwen2", "qwen3", "gemma2", "gemma3", "phi3")
FLOAT_EXPORTS = [
    "qwen2_f32", "qwen2_f16", "qwen2_bf16", "qwen3_f32", "qwen3_f16",
    "gemma2_f32", "gemma2_f16", "gemma2_bf16", "gemma3_f32", "gemma3_f16", "phi3_f32", "phi3_f16",
]  # fmt: skip
ROUND = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
TOKENS = torch.tensor([[1, 5, 9, 17, 33, 60, 2, 7]])


@pytest.fixture(scope="module")
def made(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    out, manifest = real_checkpoints("arch_gguf")
    return out, manifest["cases"]


@pytest.fixture(scope="module")
def converted(made: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every export converted back to an HF folder by ckpt_explorer (each run verified)."""
    out, cases = made
    folder = tmp_path_factory.mktemp("hf")
    done = {}
    for case in [*FLOAT_EXPORTS, "qwen2_q8_0"]:
        result = run_conversion(plan_conversion(out / cases[case]["path"], folder / case, "hf"))
        assert result.verified, result.mismatches
        done[case] = folder / case
    return done


def _source(out: Path, case: dict[str, Any]) -> dict[str, torch.Tensor]:
    return load_file(out / case["hf"] / "model.safetensors")


def _expected(arch: str, name: str, x: torch.Tensor, outtype: str) -> torch.Tensor:
    """What a lossless export of ``x`` gives back: the converter's rounding of it (1-D tensors
    stay F32), and for Gemma's norms float32's (x + 1) - 1, as transformers undoes it too."""
    if arch.startswith("gemma") and name.endswith("norm.weight"):
        return (x + 1) - 1
    if x.dim() == 1:
        return x
    return x.to(ROUND[outtype]).float()


@pytest.mark.parametrize("case", [*FLOAT_EXPORTS, "qwen2_q8_0"])
def test_gguf_to_hf_is_the_source(made: Any, converted: dict[str, Path], case: str) -> None:
    """Every source weight comes back under its own name: bit for bit the converter's rounding
    of it for the float types, within the Q8_0 bound for Q8_0; equal to transformers' own
    reading of the GGUF where it reads it."""
    out, cases = made
    c = cases[case]
    src = _source(out, c)
    got = load_file(converted[case] / "model.safetensors")
    assert set(got) == set(src)
    for name, x in src.items():
        y = got[name].float()
        if c["outtype"] == "q8_0" and x.dim() > 1:
            assert budget("Q8_0", x, y).verdict != BEYOND, name
        else:
            assert torch.equal(y, _expected(c["arch"], name, x, c["outtype"])), name
    if c["outtype"] == "f32":
        assert {str(v.dtype) for v in got.values()} == {"torch.float32"}
    if c["transformers"] is None:
        assert c["arch"] == "qwen3", c["transformers_error"]  # transformers cannot read it
        return
    oracle = load_file(out / c["transformers"])
    for name, y in got.items():
        assert torch.equal(y.float(), oracle[name].float()), name


@pytest.mark.parametrize("arch", ARCHS)
def test_converted_folder_gives_the_source_logits(
    made: Any, converted: dict[str, Path], arch: str
) -> None:
    """from_pretrained loads the F32 and F16 folders; the F32 one computes the source model's
    logits, its config says what the source's says."""
    from transformers import AutoModelForCausalLM

    out, _ = made
    source = AutoModelForCausalLM.from_pretrained(out / f"{arch}_hf", dtype=torch.float32)
    mine = AutoModelForCausalLM.from_pretrained(converted[f"{arch}_f32"], dtype=torch.float32)
    half = AutoModelForCausalLM.from_pretrained(converted[f"{arch}_f16"], dtype=torch.float32)
    assert type(mine) is type(source) is type(half)
    with torch.no_grad():
        want = source(TOKENS).logits
        got = mine(TOKENS).logits
        rough = half(TOKENS).logits
    assert torch.allclose(got, want, rtol=0, atol=1e-5), (got - want).abs().max()
    assert torch.allclose(rough, want, rtol=0, atol=5e-2), (rough - want).abs().max()
    config = json.loads((converted[f"{arch}_f32"] / "config.json").read_text())
    source_config = json.loads((out / f"{arch}_hf" / "config.json").read_text())
    keys = [
        "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
        "tie_word_embeddings", "rms_norm_eps", "max_position_embeddings",
    ]  # fmt: skip
    if arch.startswith("gemma"):
        keys += ["query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping"]
    if arch == "gemma3":
        keys += ["rope_parameters", "layer_types"]
    for key in keys:  # Qwen2's config has no head_dim: hidden_size // heads is it
        want_value = source_config.get(key, getattr(source.config, key, None))
        if key == "head_dim" and want_value is None:
            want_value = source_config["hidden_size"] // source_config["num_attention_heads"]
        have = config.get(key, getattr(mine.config, key, None))
        assert have == want_value, key


@pytest.mark.parametrize("case", FLOAT_EXPORTS)
def test_hf_view_equals_transformers_reading(made: Any, case: str) -> None:
    """The diff's view of the export under HF names holds what from_pretrained(gguf_file=)
    reads (the same transforms undone)."""
    out, cases = made
    c = cases[case]
    if c["transformers"] is None:
        pytest.skip(f"transformers could not read it: {c['transformers_error']}")
    oracle = load_file(out / c["transformers"])
    source, view = export_sides(open_checkpoint(out / c["hf"]), open_checkpoint(out / c["path"]))
    assert sorted(view.names()) == sorted(source.names())
    for name in source.names():
        assert torch.equal(view.load(name).float(), oracle[name].float()), name


@pytest.mark.parametrize("case", [*FLOAT_EXPORTS, "qwen2_q8_0"])
def test_clean_exports_are_faithful(made: Any, case: str) -> None:
    out, cases = made
    c = cases[case]
    result = diff_checkpoints(out / c["hf"], out / c["path"])
    assert result.faithful, result.format_text()
    verdicts = {r.name: r.verdict for r in result.tensors}
    assert None not in verdicts.values()
    if c["outtype"] == "q8_0":
        assert {v for n, v in verdicts.items() if "proj.weight" in n} == {"within_budget"}
        assert {v for n, v in verdicts.items() if "norm" in n or "bias" in n} == {"exact"}
    else:
        assert set(verdicts.values()) == {"exact"}
    described = " ".join(r.export_tensor or "" for r in result.tensors)
    assert ("1 + w" in described) == c["arch"].startswith("gemma")
    assert "permuted" not in described  # Qwen and Gemma converters do not permute Q/K


@pytest.mark.parametrize("arch", ARCHS)
def test_planted_norm_fault_is_found_and_ranked_first(made: Any, arch: str) -> None:
    """One norm weight times 1.5, written back by gguf's own GGUFWriter: the only tensor
    beyond budget, ranked first, under its HF name."""
    out, cases = made
    c = cases[f"{arch}_fault_norm"]
    result = diff_checkpoints(out / c["hf"], out / c["path"])
    assert not result.faithful
    ranked = result.export_rows()
    assert ranked[0].name == c["fault_hf"] and ranked[0].verdict == "beyond_budget"
    assert ranked[0].export_tensor.startswith(c["fault_gguf"])
    assert [r.verdict for r in ranked[1:]].count("beyond_budget") == 0


def test_cli_diff_says_faithful_and_finds_the_fault(made: Any) -> None:
    out, cases = made
    cli = [sys.executable, "-m", "ckpt_explorer", "diff"]
    hf = str(out / "gemma2_hf")
    ok = subprocess.run([*cli, hf, str(out / "gemma2_bf16.gguf")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    assert "NOT FAITHFUL" not in ok.stdout and "FAITHFUL" in ok.stdout
    bad = subprocess.run(
        [*cli, "--json", hf, str(out / cases["gemma2_fault_norm"]["path"])],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1, bad.stderr[-2000:]
    rows = [r for r in json.loads(bad.stdout)["tensors"] if r["verdict"] == "beyond_budget"]
    assert [r["name"] for r in rows] == [cases["gemma2_fault_norm"]["fault_hf"]]


def test_mixtral_experts_come_back_one_per_expert(real_checkpoints: Any, tmp_path: Path) -> None:
    """llama.cpp's Mixtral export (a llama GGUF with experts stacked per layer and Q/K
    permuted) -> MixtralForCausalLM: every expert under its own name, the source's F16
    rounding; it loads and computes the source's logits within F16's precision."""
    from transformers import AutoModelForCausalLM

    out, manifest = real_checkpoints("gguf")
    cases = manifest["cases"]
    result = run_conversion(plan_conversion(out / cases["mixtral"]["path"], tmp_path / "m", "hf"))
    assert result.verified, result.mismatches
    src = load_file(out / cases["mixtral_hf"]["path"] / "model.safetensors")
    got = load_file(tmp_path / "m" / "model.safetensors")
    assert set(got) == set(src)
    for name, x in src.items():
        f32 = x.dim() == 1 or ".gate." in name  # norms and the router stay F32
        assert torch.equal(got[name].float(), x if f32 else x.half().float()), name
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["model_type"] == "mixtral" and config["num_local_experts"] == 4
    source = AutoModelForCausalLM.from_pretrained(out / cases["mixtral_hf"]["path"])
    mine = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float32)
    with torch.no_grad():
        want, have = source(TOKENS).logits, mine(TOKENS).logits
    assert torch.allclose(have, want, rtol=0, atol=5e-2), (have - want).abs().max()


def test_a_scaled_gemma3_rope_is_refused(made: Any, tmp_path: Path) -> None:
    """A Gemma 3 export whose rope is scaled (the 4B-27B models): its config would be wrong,
    so the conversion says why and writes nothing."""
    from ckpt_explorer.errors import CkptExplorerError

    out, cases = made
    reader = gguf.GGUFReader(str(out / cases["gemma3_f16"]["path"]))
    scaled = tmp_path / "scaled.gguf"
    writer = gguf.GGUFWriter(str(scaled), arch="gemma3")
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    writer.add_rope_scaling_factor(8.0)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(CkptExplorerError, match=r"rope\.scaling\.type 'linear'"):
        plan_conversion(scaled, tmp_path / "hf", "hf")
    assert not (tmp_path / "hf").exists()
