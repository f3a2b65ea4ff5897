"""Export verdicts for writers that move weights before rounding (GPTQ, AWQ, a GPTQ-made
compressed-tensors export without its recipe): never "beyond budget" from the round-to-nearest
half step, "beyond budget" for a gross fault (a group's scale off by a factor, another layer's
parts, a g_idx no GPTQ writer makes), ranked first. Exports from tests/fixture_makers/
gptq_maker.py (GPTQModel, AutoAWQ, compressed-tensors on CPU) and quantized_maker.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ckpt_explorer.diff import diff_checkpoints
from ckpt_explorer.diff.quant_budget import BEYOND, UNPROVEN, WITHIN

GOOD = (
    "gptq_4bit",
    "gptq_3bit",
    "gptq_8bit",
    "gptq_4bit_static",
    "gptq_v2",
    "gptq_legacy_config",
    "awq_gemm",
    "ct_gptq",
)
FAULTS = ("fault_gptq_scale", "fault_gptq_layers", "fault_gptq_gidx", "fault_awq_scale")


@pytest.fixture(scope="module")
def made(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    out, manifest = real_checkpoints("gptq")
    return out, manifest["cases"]


@pytest.mark.parametrize("case", GOOD)
def test_good_export_is_never_beyond_budget(made: Any, case: str) -> None:
    out, cases = made
    result = diff_checkpoints(out / "hf", out / cases[case]["path"])
    rows = [r for r in result.export_rows() if r.quant and r.quant.startswith("int")]
    assert len(rows) == 14
    assert all(r.verdict in (WITHIN, UNPROVEN) for r in rows), [
        (r.name, r.verdict, r.note) for r in rows
    ]
    # the round-to-nearest budget is exceeded (the weights moved), and the reason is said
    over = [r for r in rows if r.verdict == UNPROVEN]
    assert over and all(
        (r.budget_ratio or 0) > 1 and "no gross fault" in (r.note or "") for r in over
    )
    assert result.export_verdict == "cannot_tell"
    assert not any(r.verdict == BEYOND for r in result.export_rows())


def test_gptq_made_compressed_tensors_without_recipe_is_cannot_tell(made: Any) -> None:
    """The known false-alarm risk: no recipe.yaml, so nothing says GPTQ; the codes are not the
    nearest points of their stored grid to the source, so round to nearest is not assumed."""
    out, _ = made
    assert not (out / "ct_gptq" / "recipe.yaml").exists()
    result = diff_checkpoints(out / "hf", out / "ct_gptq")
    row = result.export_rows()[0]
    assert row.verdict == UNPROVEN and row.note and "no recipe.yaml" in row.note


def test_round_to_nearest_proven_keeps_the_budget(real_checkpoints: Any) -> None:
    """compressed-tensors' own min-max rounding with a doubled scale: every code is the nearest
    point of its (wrong) grid, so the half-step budget applies and the fault stands."""
    out, manifest = real_checkpoints("quantized")
    cases = manifest["cases"]
    result = diff_checkpoints(out / "hf", out / cases["fault_scale"]["path"])
    row = result.export_rows()[0]
    assert row.name == cases["fault_scale"]["fault"] and row.verdict == BEYOND
    assert row.note and "nearest point of its stored grid" in row.note
    assert diff_checkpoints(out / "hf", out / cases["ct_w4a16"]["path"]).faithful


@pytest.mark.parametrize("case", FAULTS)
def test_planted_fault_is_beyond_budget_and_ranked_first(made: Any, case: str) -> None:
    out, cases = made
    result = diff_checkpoints(out / "hf", out / cases[case]["path"])
    ranked = result.export_rows()
    faulty = {cases[case]["fault"], cases[case].get("also")} - {None}
    assert {r.name for r in ranked[: len(faulty)]} == faulty
    assert all(
        r.verdict == BEYOND and "gross fault" in (r.note or "") for r in ranked[: len(faulty)]
    )
    assert all(r.verdict != BEYOND for r in ranked[len(faulty) :])
    assert result.export_verdict == "not_faithful"


def test_round_to_nearest_is_proven_on_rtn_exports_only(real_checkpoints: Any, made: Any) -> None:
    from ckpt_explorer.api import open_checkpoint
    from ckpt_explorer.diff.quant_evidence import nearest_groups
    from ckpt_explorer.readers.quantized.folder import part_loader, quant_weights

    q_out, _ = real_checkpoints("quantized")
    g_out, _ = made
    for folder, expected in (
        (q_out / "ct_w4a16", 1.0),
        (q_out / "ct_w4_asym", 1.0),
        (q_out / "ct_w8a8", 1.0),
        (g_out / "ct_gptq", 0.0),
    ):
        view, source = open_checkpoint(folder), open_checkpoint(folder.parent / "hf")
        load = part_loader(view)
        assert load is not None
        for name, w in (quant_weights(view) or {}).items():
            x, y = source.load(name).double(), view.load(name).double()
            found = nearest_groups(x, y, w, load)
            assert found is not None
            assert (found[0] == 1.0) if expected else (found[0] < 0.1), (folder.name, name)


def test_one_code_changed_in_a_rtn_export_stays_beyond_budget(
    real_checkpoints: Any, tmp_path: Path
) -> None:
    """No recipe, codes not all nearest: the rest of the tensor proves round to nearest, so
    the one group off its grid is a fault, not "cannot tell"."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    out, _ = real_checkpoints("quantized")
    folder = tmp_path / "one_code"
    shutil.copytree(out / "ct_w4a16", folder)
    state = load_file(str(folder / "model.safetensors"))
    name = "model.layers.0.self_attn.v_proj.weight_packed"
    packed = state[name].clone()
    packed[2, 1] = packed[2, 1] ^ torch.tensor(0x6, dtype=packed.dtype)  # one code: two steps off
    state[name] = packed
    save_file(state, str(folder / "model.safetensors"), {"format": "pt"})
    result = diff_checkpoints(out / "hf", folder)
    row = result.export_rows()[0]
    assert row.name == "model.layers.0.self_attn.v_proj.weight" and row.verdict == BEYOND
    assert row.note and "round to nearest" in row.note and "row 2" in row.note
    assert all(r.verdict != BEYOND for r in result.export_rows()[1:])
