"""Quantized safetensors exports: listing, dequantized values, pairing with the source and the
quantization budget, on exports written by the real tools (tests/fixture_makers/
quantized_maker.py). Oracles: compressed-tensors' decompression through transformers,
bitsandbytes' own ``dequantize_4bit`` / ``int8_vectorwise_dequant``, DeepSeek-V3's
``fp8_cast_bf16.py`` block dequantization."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.diff import diff_checkpoints
from ckpt_explorer.diff.quant_budget import BEYOND, EXACT, RULES, WITHIN
from ckpt_explorer.readers.quantized.checks import RULE_IGNORED, RULE_PARTS
from ckpt_explorer.validate import validate_checkpoint

CT = ("ct_w4a16", "ct_w4_asym", "ct_w8a8", "ct_fp8", "ct_fp8_block", "ct_fp8_static")
BNB = ("bnb_nf4", "bnb_fp4", "bnb_int8")
FP8 = ("fp8_block", "fp8_e5m2")
FAULTS = ("fault_scale", "fault_norm", "fault_rows", "fault_block")
KINDS = {
    "ct_w4a16": "int4/group32",
    "ct_w4_asym": "int4/group32",
    "ct_w8a8": "int8/channel",
    "ct_fp8": "fp8_e4m3/tensor",
    "ct_fp8_block": "fp8_e4m3/block128x128",
    "ct_fp8_static": "fp8_e4m3/tensor",
    "bnb_nf4": "nf4/block64",
    "bnb_fp4": "fp4/block64",
    "bnb_int8": "int8/row",
    "fp8_block": "fp8_e4m3/block128x128",
    "fp8_e5m2": "fp8_e5m2/block128x128",
}
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def made(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    out, manifest = real_checkpoints("quantized")
    return out, manifest["cases"]


def _stored(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def _linear_names() -> list[str]:
    return [
        f"model.layers.{i}.{'self_attn' if p.endswith(('q_proj', 'k_proj', 'v_proj', 'o_proj')) else 'mlp'}.{p}.weight"
        for i in range(2)
        for p in LINEAR
    ]


@pytest.mark.parametrize("case", [*CT, *BNB, *FP8])
def test_each_weight_listed_once_with_its_scheme(made: Any, case: str) -> None:
    out, cases = made
    view = open_checkpoint(out / cases[case]["path"])
    source = open_checkpoint(out / "hf")
    assert view.family == "hf-quantized" and view.kind == "model"
    assert sorted(view.names()) == sorted(source.names())  # every part folded into its weight
    by_name = {r.name: r for r in view.tensors}
    for name in _linear_names():
        assert by_name[name].dtype == KINDS[case], name
        assert tuple(by_name[name].shape) == tuple(source.record(name).shape)
    info = view.values["__metadata__.quantization"]
    weights = info["weights"]
    assert sorted(weights) == sorted(_linear_names())
    stored = _stored(out / case)
    for w in weights.values():
        assert set(w["parts"].values()) <= set(stored)
    claimed = {p for w in weights.values() for p in w["parts"].values()}
    assert claimed | set(source.names()) == set(stored) | set(weights)
    assert info["checks"] == [] and info["runtimes"]
    assert all(n["source"] == "documentation; unverified here" for n in info["runtimes"])


@pytest.mark.parametrize("case", [*CT, "fault_scale"])
def test_compressed_tensors_values_equal_its_decompression(made: Any, case: str) -> None:
    out, cases = made
    view = open_checkpoint(out / cases[case]["path"])
    oracle = load_file(str(out / f"{case}.oracle.safetensors"))
    assert set(oracle) == set(view.names())
    for name in view.names():
        assert torch.equal(view.load(name).float(), oracle[name]), name


@pytest.mark.parametrize("case", BNB)
def test_bitsandbytes_values_equal_its_dequantization(made: Any, case: str) -> None:
    bnb_f = pytest.importorskip("bitsandbytes.functional")
    out, cases = made
    view = open_checkpoint(out / cases[case]["path"])
    stored = _stored(out / case)
    for name in _linear_names():
        if case == "bnb_int8":
            scb = stored[name.removesuffix(".weight") + ".SCB"]
            ref = bnb_f.int8_vectorwise_dequant(stored[name], scb)
        else:
            parts = {
                k.removeprefix(name + "."): t for k, t in stored.items() if k.startswith(name + ".")
            }
            state = bnb_f.QuantState.from_dict(parts, device=torch.device("cpu"))
            ref = bnb_f.dequantize_4bit(stored[name], state)
        assert torch.equal(view.load(name), ref), name


def _deepseek_dequant(x: torch.Tensor, s: torch.Tensor, block: int = 128) -> torch.Tensor:
    """DeepSeek-V3 inference/kernel.py weight_dequant_kernel, element by element: each
    BLOCK_SIZE x BLOCK_SIZE tile loaded as float32 times its scale, stored in the default
    dtype (bf16 in fp8_cast_bf16.py)."""
    y = torch.empty(x.shape, dtype=torch.bfloat16)
    rows, cols = x.shape
    for i in range(0, rows, block):
        for j in range(0, cols, block):
            tile = x[i : i + block, j : j + block].to(torch.float32)
            y[i : i + block, j : j + block] = (tile * s[i // block, j // block]).to(torch.bfloat16)
    return y


@pytest.mark.parametrize("case", [*FP8, "fault_block"])
def test_fp8_block_values_equal_deepseek_dequant(made: Any, case: str) -> None:
    out, cases = made
    view = open_checkpoint(out / cases[case]["path"])
    stored = _stored(out / case)
    for name in _linear_names():
        ref = _deepseek_dequant(stored[name], stored[name + "_scale_inv"])
        mine = view.load(name)
        assert mine.dtype == torch.float32
        assert torch.equal(mine.to(torch.bfloat16), ref), name


@pytest.mark.parametrize("case", FP8)
def test_fp8_block_values_equal_transformers_fine_grained_fp8(made: Any, case: str) -> None:
    out, cases = made
    if cases[case]["oracle_error"]:
        pytest.skip(f"transformers cannot read {case}: {cases[case]['oracle_error']}")
    view = open_checkpoint(out / cases[case]["path"])
    oracle = load_file(str(out / f"{case}.oracle.safetensors"))
    for name in _linear_names():
        assert torch.equal(view.load(name), oracle[name]), name


@pytest.mark.parametrize("case", [*CT, *BNB, *FP8])
def test_faithful_exports_are_within_their_budget(made: Any, case: str) -> None:
    out, cases = made
    result = diff_checkpoints(out / "hf", out / cases[case]["path"])
    export = result.summary()["export"]
    assert result.faithful, [(r.name, r.verdict, r.budget_ratio) for r in result.export_rows()[:3]]
    assert export[BEYOND] == 0 and export["unpaired"] == 0
    rows = {r.name: r for r in result.tensors}
    for name in _linear_names():
        assert rows[name].verdict == WITHIN and rows[name].quant == KINDS[case]
        assert 0 < rows[name].budget_ratio <= 1  # quantized: some error, within its budget
    norm = rows["model.layers.0.input_layernorm.weight"]
    assert norm.verdict == EXACT  # float copies are bit-exact (bf16 rounding for DeepSeek)


def test_budget_is_tight_for_integer_schemes(made: Any) -> None:
    """The budget is half a step, not a loose bound: the worst element uses most of it."""
    out, cases = made
    result = diff_checkpoints(out / "hf", out / cases["ct_w4a16"]["path"])
    worst = max(r.budget_ratio or 0 for r in result.tensors if r.quant)
    assert worst > 0.9


@pytest.mark.parametrize("case", FAULTS)
def test_planted_fault_is_beyond_budget_and_ranked_first(made: Any, case: str) -> None:
    out, cases = made
    result = diff_checkpoints(out / "hf", out / cases[case]["path"])
    ranked = result.export_rows()
    assert not result.faithful
    assert ranked[0].name == cases[case]["fault"] and ranked[0].verdict == BEYOND
    assert all(r.verdict != BEYOND for r in ranked[1:])


def test_either_order_and_cli_json(made: Any) -> None:
    out, cases = made
    flipped = diff_checkpoints(out / cases["fault_rows"]["path"], out / "hf")
    assert flipped.export_rows()[0].name == cases["fault_rows"]["fault"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ckpt_explorer",
            "diff",
            str(out / "hf"),
            str(out / "fault_scale"),
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["summary"]["export"]["faithful"] is False
    assert doc["summary"]["export"][BEYOND] == 1


def test_inspect_json_shows_scheme_and_parts(made: Any) -> None:
    out, cases = made
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ckpt_explorer",
            "inspect",
            str(out / cases["ct_w4_asym"]["path"]),
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    w = doc["values"]["__metadata__.quantization"]["weights"]["model.layers.0.mlp.up_proj.weight"]
    assert w["type"] == "int4" and w["bits"] == 4 and w["block"] == "group 32"
    assert set(w["parts"]) == {"weight_packed", "weight_scale", "weight_zero_point", "weight_shape"}
    assert w["symmetric"] is False


def test_config_disagreeing_with_files_is_said(made: Any, tmp_path: Path) -> None:
    """An ``ignore`` list naming a quantized module, and a bitsandbytes quant type that is not
    the stored one, are findings; the diff counts them."""
    out, cases = made
    import shutil

    for case, edit in (
        ("ct_w8a8", lambda q: q["ignore"].append("re:.*layers\\.1\\.mlp\\.up_proj$")),
        ("bnb_fp4", lambda q: q.update(bnb_4bit_quant_type="nf4")),
    ):
        folder = tmp_path / case
        shutil.copytree(out / cases[case]["path"], folder)
        config = json.loads((folder / "config.json").read_text())
        edit(config["quantization_config"])
        (folder / "config.json").write_text(json.dumps(config))
        view = open_checkpoint(folder)
        checks = view.values["__metadata__.quantization"]["checks"]
        assert checks and view.warnings
        result = diff_checkpoints(out / "hf", folder)
        assert not result.faithful
        assert any(v.key.startswith("export.quantized.") for v in result.values)
        report = validate_checkpoint(folder, numeric=False)
        assert {f.rule for f in report.findings} & {RULE_IGNORED, RULE_PARTS}


def test_unchanged_exports_validate_clean(made: Any) -> None:
    out, cases = made
    for case in ("ct_w4_asym", "bnb_nf4", "fp8_block"):
        report = validate_checkpoint(out / cases[case]["path"], numeric=False)
        assert not [f for f in report.findings if f.rule.startswith("quantized.")]
        assert report.ok, [f.message for f in report.findings]


def test_sharded_export_reads_and_pairs(made: Any, tmp_path: Path) -> None:
    """The same export split into two shards with an index, as save_pretrained shards it."""
    from safetensors.torch import save_file

    out, cases = made
    src = out / cases["fault_scale"]["path"]
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "config.json").write_bytes((src / "config.json").read_bytes())
    stored = _stored(src)
    names = sorted(stored)
    weight_map = {}
    for i, chunk in enumerate((names[::2], names[1::2])):
        shard = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({n: stored[n] for n in chunk}, str(folder / shard), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(chunk, shard))
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    view = open_checkpoint(folder)
    assert view.family == "hf-quantized"
    assert len(view.values["__metadata__.quantization"]["weights"]) == 14
    ranked = diff_checkpoints(out / "hf", folder).export_rows()
    assert ranked[0].name == cases["fault_scale"]["fault"] and ranked[0].verdict == BEYOND


def test_rules_cover_every_scheme_kind() -> None:
    for kind in ("int4", "int8", "fp8_e4m3", "fp8_e5m2", "nf4", "fp4"):
        assert kind in RULES


def test_fp8_layout_matches_deepseek_config(made: Any) -> None:
    out, cases = made
    with safe_open(str(out / "fp8_block" / "model.safetensors"), "pt") as f:
        s = f.get_slice("model.layers.0.mlp.gate_proj.weight_scale_inv").get_shape()
    assert s == [2, 1]  # 256 x 128 weight, 128 x 128 blocks
    view = open_checkpoint(out / cases["fp8_block"]["path"])
    assert view.detection.detail == "fp8"


def test_parts_that_do_not_fit_are_said_not_crashed(made: Any, tmp_path: Path) -> None:
    """A block scale of the wrong shape: listing works, validate says which module, loading
    raises the tool's error (not a torch one), the diff names it."""
    from safetensors.torch import save_file

    from ckpt_explorer.errors import CkptExplorerError

    out, cases = made
    folder = tmp_path / "bad"
    src = out / cases["fp8_block"]["path"]
    folder.mkdir()
    (folder / "config.json").write_bytes((src / "config.json").read_bytes())
    stored = _stored(src)
    name = "model.layers.0.mlp.gate_proj.weight"
    stored[name + "_scale_inv"] = stored[name + "_scale_inv"][:1].contiguous()
    save_file(stored, str(folder / "model.safetensors"), metadata={"format": "pt"})
    view = open_checkpoint(folder)
    assert view.record(name).dtype == "fp8_e4m3/block128x128"
    with pytest.raises(CkptExplorerError):
        view.load(name)
    report = validate_checkpoint(folder, numeric=False)
    bad = [f for f in report.findings if f.rule == RULE_PARTS]
    assert [f.tensor for f in bad] == [name] and not report.ok


def test_error_feedback_export_is_flagged_approximate(made: Any, tmp_path: Path) -> None:
    """llm-compressor writes recipe.yaml beside its exports; a GPTQ recipe moves weights
    before rounding, so the min-max budget is marked approximate there."""
    import shutil

    out, cases = made
    folder = tmp_path / "gptq_like"
    shutil.copytree(out / cases["fault_scale"]["path"], folder)
    (folder / "recipe.yaml").write_text(
        "default_stage:\n  default_modifiers:\n    GPTQModifier: {}\n"
    )
    view = open_checkpoint(folder)
    assert (
        view.values["__metadata__.quantization"]["weights"][cases["fault_scale"]["fault"]][
            "moved_by"
        ]
        == "GPTQModifier"
    )
    result = diff_checkpoints(out / "hf", folder)
    row = result.export_rows()[0]
    assert row.name == cases["fault_scale"]["fault"]
    assert row.note and "GPTQModifier" in row.note and "approximate" in row.note
    # a half-step budget does not bound a writer that moved the weights before rounding: the
    # tensor over it is "cannot tell", not a fault (the same files without the recipe are)
    assert row.verdict == "cannot_tell" and (row.budget_ratio or 0) > 1
    assert result.export_verdict == "cannot_tell" and not result.faithful
    assert result.summary()["export"]["cannot_tell"] == 1
    assert "verdict: CANNOT TELL" in result.format_text()
    plain = diff_checkpoints(out / "hf", out / cases["fault_scale"]["path"])
    assert plain.export_verdict == "not_faithful"
    assert plain.export_rows()[0].verdict == "beyond_budget"
