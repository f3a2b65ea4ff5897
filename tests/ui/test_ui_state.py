"""The dashboard's state without a browser: root guard, opening, tables, detail, jobs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from ckpt_explorer.errors import CkptExplorerError
from ckpt_explorer.ui.paths import PathOutsideRootError, RootGuard
from ckpt_explorer.ui.state import AppState


def test_guard_refuses_everything_outside_the_root(ui_root: Path) -> None:
    guard = RootGuard(ui_root)
    assert guard.resolve("demo/resumed_from") == (ui_root / "demo" / "resumed_from").resolve()
    assert guard.resolve(str(ui_root / "demo")) == (ui_root / "demo").resolve()
    for bad in ("../", "demo/../../etc", "/etc/passwd", "outside_link", "outside_link/passwd"):
        with pytest.raises(PathOutsideRootError):
            guard.resolve(bad)
    with pytest.raises(CkptExplorerError):
        guard.resolve("no/such/thing")
    listed = guard.candidates()
    assert "demo/resumed_from" in listed and "hf_gpt2" in listed
    assert not any(p.startswith("outside_link") for p in listed)
    assert all(not Path(p).is_absolute() and ".." not in Path(p).parts for p in listed)


def test_open_builds_the_tables(ui_root: Path) -> None:
    app = AppState(ui_root)
    b = app.browse
    assert not b.open("/etc")
    assert "outside" in b.error and b.view is None
    assert b.open("demo/resumed_from")
    assert b.error == "" and b.path == "demo/resumed_from"
    weights = b.frame("weights")
    assert len(weights) == len(b.view.tensors) == 112
    assert list(weights.columns) == [
        "name",
        "parameter",
        "dtype",
        "shape",
        "numel",
        "bytes",
        "file",
        "key",
    ]
    assert b.frame("dtypes")["bytes"].sum() == b.view.tensor_bytes
    assert set(b.frame("parts")["part"]) == {
        "modeling",
        "optimizer",
        "lr_scheduler",
        "running_states.json",
    }
    top = b.module_index().children("")
    assert sum(n.nbytes for n in top) == b.view.tensor_bytes
    assert sum(n.tensors for n in top) == len(weights)
    groups, params = b.frame("groups"), b.frame("opt_params")
    assert len(groups) == 1 and groups["lr"].iloc[0] > 0
    assert params["name"].iloc[0] == "embed_tokens.weight"
    assert not b.open("demo")  # a folder of two states is not one checkpoint: error, no crash
    assert b.error and b.path == "demo/resumed_from"


def test_tensor_detail_and_focus(ui_root: Path) -> None:
    import torch

    app = AppState(ui_root)
    b = app.browse
    b.open("hf_gpt2")
    name = next(r.name for r in b.view.tensors if len(r.shape) == 2)
    b.select(name, wait=True)
    d = b.detail
    assert d is not None and not b.detail_loading and b.detail_error == ""
    t = b.view.load(name).to(torch.float64)
    assert d.stats["numel"] == t.numel()
    assert d.stats["max"] == pytest.approx(float(t.max()))
    assert d.stats["std"] == pytest.approx(float(t.std(unbiased=False)), rel=1e-6)
    assert sum(d.hist_counts) == t.numel()
    assert d.heatmap is not None and len(d.heatmap) == min(t.shape[0], 128)
    assert app.open_finding({"tensor": name})
    assert app.active == "Weight map" and b.name_filter == name


def test_optimizer_stats_job(ui_root: Path) -> None:
    app = AppState(ui_root)
    b = app.browse
    b.open("demo/resumed_from")
    b.compute_optimizer_stats(wait=True)
    df = b.opt_stats
    assert df is not None and len(df) == 28
    assert (df["step"] == 6.0).all()
    assert (df["exp_avg_sq max|x|"] > 0).all()
    assert not b.opt_stats_job.running and b.opt_stats_job.progress == 1.0


def test_compare_job(ui_root: Path) -> None:
    app = AppState(ui_root)
    c = app.compare
    c.param.update(a="demo/resumed_from", b="demo/after_resume")
    c.run(wait=True)
    assert c.error == "" and not c.running and c.progress == 1.0
    s = c.result.summary()
    assert s["tensors"] == 112 and not s["equal"]
    c.param.update(a="../x")
    c.run(wait=True)
    assert "'..'" in c.error


def test_convert_job(ui_root: Path) -> None:
    from safetensors import safe_open

    app = AppState(ui_root)
    cv = app.convert
    cv.param.update(source="hf_gpt2", target="safetensors")
    cv.destination = cv.suggest_destination()
    assert cv.make_plan(), cv.error
    cv.run(wait=True)
    assert cv.error == "" and cv.result.verified
    # the log follows the engine's Progress events: the file written, then the verification
    assert any(line.endswith(Path(cv.destination).name) for line in cv.log), cv.log
    assert any("verifying" in line for line in cv.log), cv.log
    out = ui_root / cv.destination
    with safe_open(str(out), "pt") as f:
        keys = set(f.keys())
    app.browse.open("hf_gpt2")
    assert keys == {r.name for r in app.browse.view.tensors}
    cv.destination = "../escape.safetensors"
    assert not cv.make_plan() and "relative to the root" in cv.error


def test_validate_job(ui_root: Path) -> None:
    app = AppState(ui_root)
    v = app.validate
    v.target = "demo/resumed_from"
    v.run(wait=True)
    assert v.error == "" and v.findings is not None
    assert {"rule", "severity", "message"} <= set(v.findings.columns)


def test_resume_job(ui_root: Path) -> None:
    app = AppState(ui_root)
    r = app.resume
    r.param.update(a="demo/resumed_from", b="demo/after_resume")
    r.run(wait=True)
    assert r.error == "" and r.causes
    assert "scheduler" in r.causes[0]["cause"]


def test_parameters_card_counts_the_model_only(ui_root: Path) -> None:
    from ckpt_explorer.ui.components.common import fmt_count
    from ckpt_explorer.ui.components.overview import parameters_card

    app = AppState(ui_root)
    b = app.browse
    assert b.open("demo/resumed_from")
    model = b.view.parts["modeling"]
    n_model = sum(r.numel for r in model.tensors)
    n_all = sum(r.numel for r in b.view.tensors)
    assert n_all > 2 * n_model  # AdamW moments outweigh the model
    title, value, sub = parameters_card(b.view)
    assert title == "Parameters" and value == fmt_count(n_model)
    assert sub == f"{n_model:,} elements in modeling"
    assert b.open("demo/resumed_from/optimizer")  # an optimizer alone: no parameter count
    assert parameters_card(b.view)[1:] == ("—", "no model part in this optimizer")
    assert b.open("hf_gpt2")
    n = sum(r.numel for r in b.view.tensors)
    assert parameters_card(b.view)[2] == f"{n:,} elements"


def test_optimizer_tables_and_treemap_name_parameters(ui_root: Path) -> None:
    from ckpt_explorer.ui.tables import filter_weights

    b = AppState(ui_root).browse
    assert b.open("demo/resumed_from")
    params = b.frame("opt_params")
    names = b.view.parts["optimizer"].optimizer.names
    assert len(params) == 28 and set(params["named"]) == {"aligned"}
    assert list(params["name"]) == [names[i].name for i in params["id"]]
    index = b.module_index()
    # optimizer states folded under their parameter's name, states as leaves
    node = {n.filter: n for n in index.children("optimizer/embed_tokens.")}
    param = node["optimizer/embed_tokens.weight → "]
    assert param.tensors == 3 and param.label == "weight" and param.has_children
    leaves = index.children(param.filter)
    assert [n.label for n in leaves] == ["exp_avg", "exp_avg_sq", "step"]
    assert leaves[0].tensor == "optimizer/state.0.exp_avg" and not leaves[0].has_children
    weights = b.frame("weights")
    seen = 0
    todo = [""]
    while todo:  # every node filters the weight map to its own tensors
        for n in index.children(todo.pop()):
            shown = filter_weights(weights, n.filter, prefix=True)
            assert len(shown) == n.tensors, n.filter
            assert int(shown["bytes"].sum()) == n.nbytes, n.filter
            seen += 1
            if n.has_children:
                todo.append(n.filter)
            else:
                assert list(shown["name"]) == [n.tensor]
    assert seen > len(weights)  # every tensor once as a leaf, plus the modules above them
    # a filter on a layer finds its optimizer states too
    layer0 = filter_weights(weights, "layers.0.")
    assert any(n.startswith("optimizer/state.") for n in layer0["name"])
    row = weights.set_index("name").loc["optimizer/state.0.exp_avg"]
    assert row["parameter"] == "embed_tokens.weight → exp_avg"
    assert b.open("demo/resumed_from/optimizer")  # no model to align against: unknown
    params = b.frame("opt_params")
    assert set(params["named"]) == {"unknown"} and set(params["name"]) == {"unknown"}
    assert not b.frame("weights")["parameter"].str.len().any()


def test_ambiguous_names_are_shown_as_ambiguous(tmp_path: Path) -> None:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(4), nn.LayerNorm(4))  # four parameters of shape [4]
    model[0].weight.requires_grad_(False)  # frozen: which three the optimizer holds is open
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    model(torch.randn(2, 4)).square().mean().backward()
    opt.step()
    (tmp_path / "run").mkdir()
    torch.save(model.state_dict(), tmp_path / "run" / "pytorch_model.bin")
    torch.save(opt.state_dict(), tmp_path / "run" / "optimizer.pt")
    b = AppState(tmp_path).browse
    assert b.open("run"), b.error
    params = b.frame("opt_params")
    assert set(params["named"]) == {"ambiguous"}
    assert params["name"].iloc[0] == "ambiguous: 0.weight | 0.bias"
    assert not b.frame("weights")["parameter"].str.len().any()


def test_parameters_card_of_a_dcp_training_state(real_checkpoints: Any) -> None:
    from ckpt_explorer import open_checkpoint
    from ckpt_explorer.ui.components.overview import parameters_card

    folder, manifest = real_checkpoints("dcp")
    case = manifest["cases"]["dcp_training_state"]
    view = open_checkpoint(folder / case["path"])
    model = [e for n, e in case["tensors"].items() if n.startswith("model.")]
    n = sum(math.prod(e["shape"]) for e in model)
    assert n < sum(r.numel for r in view.tensors)
    assert parameters_card(view)[2] == f"{n:,} elements in model.*"
