"""One open checkpoint drives every view: after a second checkpoint is opened (a link's
``?ckpt=`` or the sidebar), Convert, Validate, Layout, Optimizer and the resume doctor act on
it, or on what is picked in the view, and say which on screen.

The root holds the demo (a training state resumed wrongly and its run), an HF GPT-2 written
by transformers' save_pretrained and an AdamW state saved by torch.save.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import panel as pn
import pytest

from ckpt_explorer import open_checkpoint
from ckpt_explorer.ui.layout import make_state
from ckpt_explorer.ui.state import AppState
from ckpt_explorer.ui.url_state import apply_query

EXP_AVG_SQ = 5e-07  # every exp_avg_sq of the planted optimizer


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, real_checkpoints: Any) -> Path:
    import torch

    from ckpt_explorer.demo import make_demo

    out = tmp_path_factory.mktemp("open_root")
    make_demo(out / "demo")
    hf_dir, manifest = real_checkpoints("hf")
    shutil.copytree(hf_dir / manifest["cases"]["gpt2_sharded"]["path"], out / "hf_gpt2")
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    sd = opt.state_dict()
    for st in sd["state"].values():
        st["exp_avg_sq"].fill_(EXP_AVG_SQ)
    (out / "planted").mkdir()
    torch.save(sd, out / "planted" / "optim.pt")
    return out


def two_open(root: Path, query: dict[str, str]) -> AppState:
    """The served page's state: the demo's pair given to the server, then a link's query."""
    demo = root / "demo"
    app = make_state([demo / "resumed_from", demo / "after_resume"], root)
    apply_query(app, query)
    return app


def texts(viewable: Any) -> str:
    """Every Markdown/HTML/Alert text and Card title under ``viewable`` (Viewers opened)."""
    out: list[str] = []
    stack = [viewable]
    while stack:
        obj = stack.pop()
        if isinstance(obj, pn.viewable.Viewer):
            obj = obj.__panel__()
        if isinstance(obj, pn.pane.Markdown | pn.pane.HTML | pn.pane.Alert):
            out.append(str(obj.object))
        if isinstance(obj, pn.layout.Card):
            out.append(obj.title)
        if isinstance(obj, pn.layout.ListLike | pn.layout.Card):
            stack.extend(obj.objects)
    return "\n".join(out)


def test_convert_converts_the_checkpoint_a_link_opened(root: Path) -> None:
    from ckpt_explorer.ui.components.convert import ConvertView

    app = two_open(root, {"ckpt": "hf_gpt2", "tab": "Convert"})
    assert app.browse.path == "hf_gpt2"
    c = app.convert
    view = ConvertView(app=app)
    assert c.source == "hf_gpt2"
    assert "Converts `hf_gpt2` — the checkpoint open in the sidebar" in texts(view)
    view._plan()  # the Plan button: a name is suggested, the plan made
    assert c.plan is not None, c.error
    assert c.plan.source.resolve() == (root / "hf_gpt2").resolve()
    c.run(wait=True)
    assert c.result is not None and c.result.verified, c.error
    out = open_checkpoint(root / c.destination)
    want = open_checkpoint(root / "hf_gpt2")
    assert sorted(r.name for r in out.tensors) == sorted(r.name for r in want.tensors)
    assert "written and verified" in texts(view)


def test_a_plan_is_dropped_when_another_checkpoint_opens(root: Path) -> None:
    from ckpt_explorer.ui.components.convert import ConvertView

    app = two_open(root, {})
    c = app.convert
    view = ConvertView(app=app)
    c.param.update(model_only=True, destination="demo-model.safetensors")
    assert c.make_plan(), c.error
    assert app.browse.open("hf_gpt2")
    assert c.source == "hf_gpt2" and c.plan is None  # Run cannot convert the demo any more
    c.source = "demo/after_resume"  # picked in the Convert view itself: said so
    shown = texts(view)
    assert "Converts `demo/after_resume`, picked here" in shown
    assert "not `hf_gpt2`, open in the sidebar" in shown


def test_validate_checks_the_open_checkpoint_and_labels_older_findings(root: Path) -> None:
    from ckpt_explorer.ui.components.validate import ValidateView

    app = two_open(root, {"ckpt": "hf_gpt2"})
    v = app.validate
    view = ValidateView(app=app)
    assert v.target == "hf_gpt2"
    view._start()  # the Validate button
    v.wait()
    assert v.error == "" and v.checked == "hf_gpt2"
    assert Path(v.report_obj.path).resolve() == (root / "hf_gpt2").resolve()
    assert app.browse.open("demo/resumed_from")
    shown = texts(view)
    assert "Validates `demo/resumed_from` — the checkpoint open in the sidebar" in shown
    assert "Findings of `hf_gpt2` — not of `demo/resumed_from`" in shown


def test_layout_checks_the_open_checkpoint(root: Path) -> None:
    from ckpt_explorer.fit import fit_checkpoint
    from ckpt_explorer.ui.components.layout_view import LayoutView

    app = two_open(root, {"ckpt": "hf_gpt2"})
    app.active = "Layout"
    view = LayoutView(app=app)
    app.fit.wait()
    f = app.fit
    assert f.checkpoint == "hf_gpt2" and f.report is not None, f.error
    want = fit_checkpoint(open_checkpoint(root / "hf_gpt2"), f.layout())
    assert [c.message for c in f.report.checks] == [c.message for c in want.checks]
    assert "Checks of `hf_gpt2`" in texts(view)


def test_doctor_diagnoses_from_the_open_checkpoint(root: Path) -> None:
    from ckpt_explorer.ui.components.resume import ResumeView

    app = two_open(root, {"ckpt": "demo/run/step-4"})
    r = app.resume
    view = ResumeView(app=app)
    assert (r.a, r.b) == ("demo/run/step-4", "demo/after_resume")
    assert "Diagnoses the resume from `demo/run/step-4` — the checkpoint open" in texts(view)
    r.run(wait=True)
    assert r.error == "" and r.examined == ("demo/run/step-4", "demo/after_resume")
    assert Path(r.report_obj.a).resolve() == (root / "demo" / "run" / "step-4").resolve()
    assert r.report_obj.facts["optimizer step"][0] == 4
    # opening B keeps the pair: B is not what training resumed from
    assert app.browse.open("demo/after_resume")
    assert (r.a, r.b) == ("demo/run/step-4", "demo/after_resume")


def test_optimizer_statistics_of_a_closed_checkpoint_are_dropped(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ckpt_explorer.ui.tensor_stats as stats

    gate = threading.Event()
    real = stats.tensor_stats

    def held(*args: Any, **kw: Any) -> Any:
        gate.wait(60)
        return real(*args, **kw)

    monkeypatch.setattr(stats, "tensor_stats", held)
    app = two_open(root, {})
    b = app.browse
    b.compute_optimizer_stats()  # the demo's: held until the other checkpoint is open
    first = b.opt_stats_job.job
    assert b.open("planted/optim.pt")
    gate.set()
    assert first is not None
    first.join()
    assert b.opt_stats is None and not b.opt_stats_job.running
    b.compute_optimizer_stats(wait=True)
    df = b.opt_stats
    assert df is not None and len(df) == 2
    assert df["exp_avg_sq max|x|"].tolist() == pytest.approx([EXP_AVG_SQ] * 2)


@pytest.mark.timeout(600)
def test_convert_in_a_browser_converts_the_checkpoint_of_the_link(
    root: Path, browser: Any, request: pytest.FixtureRequest
) -> None:
    """A served page opened by a link to another checkpoint: its Convert tab says it converts
    that one, and Plan / Run write that one (the server was started with the demo open)."""
    from conftest import ARTIFACTS, ConsoleLog, serve_app
    from safetensors import safe_open
    from ui_pages import text, wait_text

    demo = root / "demo"
    with serve_app(root, [demo / "resumed_from"], "panel-serve-open.log") as url:
        context = browser.new_context(viewport={"width": 1500, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(120_000)
        log = ConsoleLog(page)
        page.goto(url + "?ckpt=hf_gpt2&tab=Convert")
        wait_text(page, "t.includes('Converts hf_gpt2 — the checkpoint open in the sidebar')")
        page.get_by_placeholder("e.g. model-hf").fill("from-link.safetensors")
        page.get_by_role("button", name="Plan").click()
        page.locator("text=Byte copy").first.wait_for()
        assert "hf_gpt2 → from-link.safetensors" in text(page)
        page.get_by_role("button", name="Run conversion").click()
        page.locator("text=Verified bit for bit").first.wait_for()
        wait_text(page, "t.includes('written: ') && t.includes('written and verified')")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"ui-{request.node.name}.png"))
        context.close()
    assert log.errors == [], "\n".join(log.errors)
    with safe_open(str(root / "from-link.safetensors"), "pt") as f:
        written = set(f.keys())
    assert written == {r.name for r in open_checkpoint(root / "hf_gpt2").tensors}
