"""K-quant exports made by llama.cpp's own llama-quantize (tests/fixture_makers/kquant_maker.py):
values equal gguf.GGUFReader's, an untouched export is never called not faithful, and planted
faults are beyond budget and ranked first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.diff import diff_checkpoints
from ckpt_explorer.diff.quant_budget import BEYOND, UNPROVEN, WITHIN, budget

gguf = pytest.importorskip("gguf")

QTYPES = ("q4_k_m", "q5_k_m", "q6_k", "q3_k_m", "q2_k", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0")
K_TYPES = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}
FAULTS = ("fault_kq_norm", "fault_kq_swap")


@pytest.fixture(scope="module")
def made(real_checkpoints: Any) -> tuple[Path, dict[str, Any]]:
    out, manifest = real_checkpoints("kquant")
    return out, manifest["cases"]


def test_fixtures_hold_k_quants(made: Any) -> None:
    """The 256-wide tiny model really is stored in K-quants (no fallback for every tensor)."""
    _, cases = made
    held = {t for case in QTYPES for t in cases[case]["types"].values()}
    assert held >= K_TYPES
    assert cases["q4_k_m"]["types"]["blk.0.attn_q.weight"] == "Q4_K"


@pytest.mark.parametrize("case", [*QTYPES, *FAULTS])
def test_values_match_ggufreader(made: Any, case: str) -> None:
    out, cases = made
    path = out / cases[case]["path"]
    view = open_checkpoint(path)
    reader = gguf.GGUFReader(str(path))
    assert sorted(view.names()) == sorted(t.name for t in reader.tensors)
    for t in reader.tensors:
        assert view.record(t.name).dtype is not None
        want = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        got = view.load(t.name).float().numpy()
        assert got.shape == want.shape and np.array_equal(got, want), t.name


@pytest.mark.parametrize("case", QTYPES)
def test_untouched_export_is_within_budget(made: Any, case: str) -> None:
    """Every tensor of llama-quantize's own output is exact or within its budget, none
    approximate: the K-quant budget comes from the export's own stored scales."""
    out, cases = made
    result = diff_checkpoints(out / "hf", out / cases[case]["path"])
    rows = result.export_rows()
    assert rows and None not in {r.verdict for r in rows}
    bad = [
        (r.name, r.quant, r.verdict, r.budget_ratio)
        for r in rows
        if r.verdict in (BEYOND, UNPROVEN)
    ]
    assert not bad
    assert result.export_verdict == "faithful"
    held = {r.quant for r in rows}
    assert held == set(cases[case]["types"].values())


def test_stacked_k_quant_experts_are_within_budget(made: Any) -> None:
    """Each expert of a stacked K-quant tensor is judged on its own slice of the blocks."""
    out, cases = made
    case = cases["mixtral_q4_k_m"]
    assert any(t.endswith("_K") for n, t in case["types"].items() if "_exps" in n)
    result = diff_checkpoints(out / cases["mixtral_hf"]["path"], out / case["path"])
    rows = result.export_rows()
    experts = [r for r in rows if ".experts." in r.name]
    assert len(experts) == 12 and {r.quant for r in experts} <= K_TYPES
    assert {r.verdict for r in rows} <= {"exact", WITHIN}
    assert result.export_verdict == "faithful"


@pytest.mark.parametrize("case", FAULTS)
def test_planted_fault_is_found_and_ranked_first(made: Any, case: str) -> None:
    out, cases = made
    result = diff_checkpoints(out / "hf", out / cases[case]["path"])
    ranked = result.export_rows()
    assert ranked[0].name == cases[case]["fault_hf"]
    assert ranked[0].verdict == BEYOND
    assert ranked[0].export_tensor.startswith(cases[case]["fault_gguf"])
    assert [r.verdict for r in ranked[1:]].count(BEYOND) == 0
    assert result.export_verdict == "not_faithful"


def test_scale_fault_in_a_k_quant_block_is_beyond(made: Any) -> None:
    """A super-block's F16 ``d`` doubled (bytes 0-1 of a Q4_K block): beyond budget, although
    the grid the budget reads is the doubled one."""
    out, cases = made
    path = out / cases["q4_k_m"]["path"]
    reader = gguf.GGUFReader(str(path))
    t = next(t for t in reader.tensors if t.name == "blk.0.ffn_up.weight")
    assert t.tensor_type.name == "Q4_K"
    raw = np.array(t.data, dtype=np.uint8).reshape(-1)
    source = open_checkpoint(out / "hf").load("model.layers.0.mlp.up_proj.weight")
    values = torch.from_numpy(gguf.quants.dequantize(raw.reshape(t.data.shape), t.tensor_type))
    clean = budget("Q4_K", source, values, {"raw": raw})
    assert clean.verdict == WITHIN
    bad = raw.copy()
    d = np.frombuffer(bad[144 * 3 : 144 * 3 + 2].tobytes(), "<f2") * 2
    bad[144 * 3 : 144 * 3 + 2] = np.frombuffer(d.astype("<f2").tobytes(), np.uint8)
    moved = torch.from_numpy(gguf.quants.dequantize(bad.reshape(t.data.shape), t.tensor_type))
    assert budget("Q4_K", source, moved, {"raw": bad}).verdict == BEYOND


def test_without_its_bytes_a_k_quant_over_the_rough_rule_is_cannot_tell() -> None:
    """The plain-quantizer rule does not bound a K-quant writer: over it is cannot_tell."""
    x = torch.linspace(-1, 1, 256).reshape(1, 256)
    assert budget("Q4_K", x, x + 0.5).verdict == UNPROVEN
    assert budget("Q4_K", x, x).verdict == "exact"
