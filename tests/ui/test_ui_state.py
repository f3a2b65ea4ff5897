"""The dashboard's state without a browser: root guard, opening, tables, detail, jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_explorer.errors import CkptExplorerError
from ckpt_explorer.ui import engines
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
    assert list(weights.columns) == ["name", "dtype", "shape", "numel", "bytes", "file"]
    assert b.frame("dtypes")["bytes"].sum() == b.view.tensor_bytes
    assert set(b.frame("parts")["part"]) == {
        "modeling",
        "optimizer",
        "lr_scheduler",
        "running_states.json",
    }
    tree = b.frame("tree")
    assert tree.loc[tree["parent"] == "", "bytes"].sum() == b.view.tensor_bytes
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


@pytest.mark.skipif(not engines.available("diff"), reason="diff engine not in this version")
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


@pytest.mark.skipif(not engines.available("convert"), reason="convert engine not in this version")
def test_convert_job(ui_root: Path) -> None:
    from safetensors import safe_open

    app = AppState(ui_root)
    cv = app.convert
    cv.param.update(source="hf_gpt2", target="safetensors")
    cv.destination = cv.suggest_destination()
    assert cv.make_plan(), cv.error
    cv.run(wait=True)
    assert cv.error == "" and cv.result.verified
    out = ui_root / cv.destination
    with safe_open(str(out), "pt") as f:
        keys = set(f.keys())
    app.browse.open("hf_gpt2")
    assert keys == {r.name for r in app.browse.view.tensors}
    cv.destination = "../escape.safetensors"
    assert not cv.make_plan() and "relative to the root" in cv.error


@pytest.mark.skipif(not engines.available("validate"), reason="validate not in this version")
def test_validate_job(ui_root: Path) -> None:
    app = AppState(ui_root)
    v = app.validate
    v.target = "demo/resumed_from"
    v.run(wait=True)
    assert v.error == "" and v.findings is not None
    assert {"rule", "severity", "message"} <= set(v.findings.columns)


@pytest.mark.skipif(not engines.available("resume"), reason="resume doctor not in this version")
def test_resume_job(ui_root: Path) -> None:
    app = AppState(ui_root)
    r = app.resume
    r.param.update(a="demo/resumed_from", b="demo/after_resume")
    r.run(wait=True)
    assert r.error == "" and r.causes
    assert "scheduler" in r.causes[0]["cause"]
