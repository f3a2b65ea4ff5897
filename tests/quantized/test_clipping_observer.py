"""compressed-tensors exports written by llm-compressor with its ``mse`` weight observer
(tests/fixture_makers/llmcompressor_maker.py): the observer shrinks each group's range and clips
what lies past it, so values exceed the min-max half-step budget at the grid's ends only. Such an
export is no fault: *cannot tell*, whether or not anything names the observer, while a planted
fault in it is still beyond budget and ranked first."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from ckpt_explorer.api import open_checkpoint
from ckpt_explorer.diff import diff_checkpoints
from ckpt_explorer.diff.quant_budget import BEYOND, UNPROVEN

WRITTEN = ("ct_mse", "ct_mse_asym")  # as llm-compressor wrote them
BARE = ("ct_mse_bare", "ct_mse_asym_bare")  # no recipe.yaml, no observer in config.json
FAULTS = ("fault_mse_scale", "fault_mse_layers", "fault_mse_shrunk")


@pytest.fixture(scope="module")
def made(real_checkpoints: Any) -> tuple[Any, dict[str, Any]]:
    out, manifest = real_checkpoints("llmcompressor")
    return out, manifest["cases"]


@pytest.mark.parametrize("case", WRITTEN)
def test_values_equal_its_decompression(made: Any, case: str) -> None:
    out, cases = made
    view = open_checkpoint(out / cases[case]["path"])
    oracle = load_file(str(out / f"{case}.oracle.safetensors"))
    assert set(oracle) == set(view.names())
    for name in view.names():
        assert torch.equal(view.load(name).float(), oracle[name]), name


@pytest.mark.parametrize("case", BARE)
def test_clipped_export_without_its_observer_named_is_cannot_tell(made: Any, case: str) -> None:
    out, cases = made
    result = diff_checkpoints(out / "hf", out / cases[case]["path"])
    rows = [r for r in result.export_rows() if r.quant and r.quant.startswith("int4")]
    assert len(rows) == 14
    # the real observer clipped: the min-max budget is exceeded in every Linear ...
    assert all((r.budget_ratio or 0) > 1 for r in rows)
    # ... only where the stored code sits at its grid's end: no fault
    for r in rows:
        assert r.verdict == UNPROVEN, (r.name, r.note)
        assert r.note and "all clipped at the grid's ends" in r.note and "not named" in r.note
    assert result.export_verdict == UNPROVEN and result.summary()["export"][BEYOND] == 0


@pytest.mark.parametrize("case", ["ct_mse", "ct_mse_recipe", "ct_mse_no_recipe"])
def test_named_observer_is_said(made: Any, case: str, tmp_path: Path) -> None:
    """As written, config.json and recipe.yaml name the observer; either alone is enough."""
    out, cases = made
    if case == "ct_mse_no_recipe":  # config.json alone
        folder = tmp_path / case
        shutil.copytree(out / cases["ct_mse"]["path"], folder)
        (folder / "recipe.yaml").unlink()
    else:
        folder = out / cases[case]["path"]
    weights = open_checkpoint(folder).values["__metadata__.quantization"]["weights"]
    assert {w["moved_by"] for w in weights.values()} == {"observer mse"}
    result = diff_checkpoints(out / "hf", folder)
    rows = [r for r in result.export_rows() if r.quant and r.quant.startswith("int4")]
    assert rows and all(r.verdict == UNPROVEN for r in rows)
    assert all(r.note and "clipping observer (observer mse;" in r.note for r in rows)
    assert result.export_verdict == UNPROVEN


@pytest.mark.parametrize("case", FAULTS)
def test_planted_fault_in_clipped_export_is_ranked_first(made: Any, case: str) -> None:
    out, cases = made
    result = diff_checkpoints(out / "hf", out / cases[case]["path"])
    ranked = result.export_rows()
    assert not result.faithful and result.export_verdict != UNPROVEN
    assert ranked[0].name == cases[case]["fault"] and ranked[0].verdict == BEYOND
    also = cases[case].get("also")
    faulty = {cases[case]["fault"], also} - {None}
    assert {r.name for r in ranked if r.verdict == BEYOND} == faulty


def test_clipping_past_any_observer_is_said(made: Any) -> None:
    """A scale far below min-max clips past what an observer's search reaches: a fault, said."""
    out, cases = made
    result = diff_checkpoints(out / "hf", out / cases["fault_mse_shrunk"]["path"])
    row = result.export_rows()[0]
    assert row.verdict == BEYOND and row.note and "0.40-0.40x min-max: below 0.5x" in row.note


@pytest.mark.parametrize(("kwargs", "verdict"), [({}, BEYOND), ({"maxshrink": 0.7}, UNPROVEN)])
def test_named_observer_does_not_excuse_clipping_past_its_search(
    made: Any, tmp_path: Path, kwargs: dict[str, Any], verdict: str
) -> None:
    """The shrunk fault with ``observer: mse`` written into its config: still beyond (MSE's
    search stops at 0.8x), unless its ``observer_kwargs`` let the search go that far."""
    out, cases = made
    folder = tmp_path / "named"
    shutil.copytree(out / cases["fault_mse_shrunk"]["path"], folder)
    doc = json.loads((folder / "config.json").read_text())
    for group in doc["quantization_config"]["config_groups"].values():
        group["weights"].update({"observer": "mse", "observer_kwargs": kwargs} if kwargs else {})
        group["weights"].setdefault("observer", "mse")
    (folder / "config.json").write_text(json.dumps(doc))
    result = diff_checkpoints(out / "hf", folder)
    row = next(r for r in result.export_rows() if r.name == cases["fault_mse_shrunk"]["fault"])
    assert row.verdict == verdict, row.note
    if verdict == BEYOND:
        assert result.export_rows()[0] is row and result.summary()["export"][BEYOND] == 1
