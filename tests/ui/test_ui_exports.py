"""Exports that round-trip: the CSV and JSON of a table read back to the values the engine
computed (shapes as lists, whole numbers as integers, floats at full precision), in files
named after what they hold and which checkpoints."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import panel as pn
import pytest

from ckpt_explorer import open_checkpoint
from ckpt_explorer.ui.state import AppState

LAYERS = 12


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two safetensors models (layer 0 and every third layer changed by a non-round amount)
    and an AdamW state whose exp_avg_sq are float32 values no 6-digit text keeps."""
    import torch
    from safetensors.torch import save_file

    out = tmp_path_factory.mktemp("exports")
    gen = torch.Generator().manual_seed(0)
    a = {f"model.layers.{i}.w": torch.randn(16, 24, generator=gen) for i in range(LAYERS)}
    a["model.norm.scale"] = torch.tensor(1.5)
    b = {k: v + (1 / 3 if k.endswith(("0.w", "3.w")) else 0) for k, v in a.items()}
    (out / "run" / "a").mkdir(parents=True)
    (out / "run" / "b").mkdir(parents=True)
    save_file(a, str(out / "run" / "a" / "model.safetensors"))
    save_file(b, str(out / "run" / "b" / "model.safetensors"))
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 8, generator=gen)).sum().backward()
    opt.step()
    sd = opt.state_dict()
    for st in sd["state"].values():
        st["exp_avg_sq"].fill_(1 / 3)
    torch.save(sd, out / "optim.pt")
    return out


def objects(viewable: Any) -> list[Any]:
    out: list[Any] = []
    stack = [viewable]
    while stack:
        obj = stack.pop()
        if isinstance(obj, pn.viewable.Viewer):
            obj = obj.__panel__()
        out.append(obj)
        if isinstance(obj, pn.layout.ListLike | pn.layout.Card):
            stack.extend(obj.objects)
    return out


def downloads(view: Any, what: str) -> tuple[str, Any, str, list[dict[str, Any]]]:
    """(CSV file name, the CSV's cells as text, JSON file name, the JSON read back) of the
    export buttons of ``view`` whose files start with ``what``."""
    import pandas as pd

    rows = [o for o in objects(view) if "export" in (getattr(o, "css_classes", None) or [])]
    [(csv, js)] = [r.objects for r in rows if r.objects[0].filename.startswith(what)]
    return (
        csv.filename,
        pd.read_csv(io.StringIO(csv.callback().getvalue()), dtype=str, keep_default_na=False),
        js.filename,
        json.loads(js.callback().getvalue()),
    )


def test_weight_map_export_has_shapes_as_lists_and_integers(root: Path) -> None:
    from ckpt_explorer.ui.components.weight_map import WeightMap

    app = AppState(root)
    assert app.browse.open("run/a")
    view = WeightMap(app=app)
    app.browse.filter_text(name="layers.1")  # the rows shown: layers.1, 10, 11
    csv_name, csv, json_name, records = downloads(view, "tensors")
    assert (csv_name, json_name) == ("tensors-run_a.csv", "tensors-run_a.json")
    want = {r.name: r for r in open_checkpoint(root / "run" / "a").tensors}
    assert [r["name"] for r in records] == [f"model.layers.{i}.w" for i in (1, 10, 11)]
    for r in records:
        assert r["shape"] == list(want[r["name"]].shape) == [16, 24]
        assert r["numel"] == 384 and isinstance(r["numel"], int)
        assert r["bytes"] == want[r["name"]].nbytes
    assert [json.loads(s) for s in csv["shape"]] == [[16, 24]] * 3
    app.browse.filter_text(name="norm")
    _, csv, _, records = downloads(view, "tensors")
    assert records[0]["shape"] == [] and json.loads(csv["shape"][0]) == []  # a scalar


def test_compare_export_keeps_layers_whole_and_figures_exact(root: Path) -> None:
    from ckpt_explorer.ui.components.compare import CompareView

    app = AppState(root)
    app.compare.param.update(a="run/a", b="run/b")
    view = CompareView(app=app)
    app.compare.run(wait=True)
    result = app.compare.result
    assert result is not None, app.compare.error
    csv_name, csv, json_name, records = downloads(view, "compare")
    assert csv_name == "compare-run_a-vs-run_b.csv" and json_name.endswith("-vs-run_b.json")
    exact = {t.name: t for t in result.tensors}
    changed = [r for r in records if r["status"] == "changed"]
    assert {r["layer"] for r in changed} == {0, 3, 10}
    assert all(isinstance(r["layer"], int) for r in changed)
    for r in changed:
        assert r["rel_l2"] == exact[r["name"]].rel_l2  # every digit, not 6
        assert r["shape_a"] == [16, 24]
    assert set(csv["layer"]) == {"0", "3", "10"}  # the changed rows shown; "0", not "0.0"
    by_name = dict(zip(csv["name"], csv["rel_l2"], strict=True))
    assert all(float(by_name[r["name"]]) == r["rel_l2"] for r in changed)


def test_optimizer_statistics_export_full_precision(root: Path) -> None:
    import torch

    from ckpt_explorer.ui.components.optimizer import OptimizerView

    app = AppState(root)
    assert app.browse.open("optim.pt")
    view = OptimizerView(app=app)
    app.browse.compute_optimizer_stats(wait=True)
    third = float(torch.tensor(1 / 3, dtype=torch.float32))  # 0.3333333432674408
    csv_name, csv, _, records = downloads(view, "optimizer_state")
    assert csv_name == "optimizer_state_statistics-optim.pt.csv"
    assert [r["exp_avg_sq max|x|"] for r in records] == [third, third]
    assert [float(x) for x in csv["exp_avg_sq max|x|"]] == [third, third]
    assert [r["id"] for r in records] == [0, 1]
