"""In a notebook a button acts on what the form shows when it is pressed.

The browser sends a text box's new value (committed as the box loses focus) and the click on
the button that took the focus in one comm message. Panel applies such a message with its
document held: the value reaches Python when the message ends, the click is handled at once.
So a Convert planned with the old output name (a suggested one written instead of the name
typed) and a Compare ran with the old tolerance. Seen in JupyterLab's kernel frames; here the
same message goes through Panel's own notebook handler (``_on_msg``) on a running event loop.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import panel as pn
import pytest
from bokeh.document import Document
from test_ui_notebook_threads import RecordingComm

from ckpt_explorer.ui import owner_thread
from ckpt_explorer.ui.state import AppState


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    save_file({"layer.w": torch.ones(8, 8)}, str(tmp_path / "a.safetensors"))
    save_file({"layer.w": torch.ones(8, 8) * 1.001}, str(tmp_path / "b.safetensors"))
    return tmp_path


def models(root: Any) -> dict[str, Any]:
    """The Bokeh models under ``root`` by type name, the first of each."""
    out: dict[str, Any] = {}
    for m in root.references():
        out.setdefault(type(m).__name__, m)
    return out


def press_with(root: Any, changes: list[tuple[Any, str, Any]], button: Any) -> None:
    """One comm message from the browser, as Panel's notebook handler receives it: the
    widgets' ``changes`` (model, attribute, value), then a click on ``button``."""
    from ckpt_explorer.ui import layout  # noqa: F401  (Panel's extensions loaded)

    view, _root, _doc, comm = pn.state._views[root.ref["id"]]
    events: list[dict[str, Any]] = [
        {"kind": "ModelChanged", "model": {"id": m.id}, "attr": attr, "new": new}
        for m, attr, new in changes
    ]
    click = {"type": "event", "name": "button_click", "values": {"type": "map"}}
    click["values"]["entries"] = [["model", {"id": button.id}]]
    events.append({"kind": "MessageSent", "msg_type": "bokeh_event", "msg_data": click})
    header = {"msgid": "m1", "msgtype": "PATCH-DOC"}  # as the browser's comm sends it
    data = {
        "header": header,
        "metadata": {},
        "content": {"events": events},
        "_buffers": {},
    }
    from panel.models.comm_manager import CommManager

    view._on_msg(root.ref["id"], CommManager(comm_id=comm.id, plot_id=root.ref["id"]), data)


def on_kernel_loop(monkeypatch: pytest.MonkeyPatch, fn: Any, done: Any) -> None:
    """``fn()`` inside a running event loop, as a kernel handles a comm message; the loop
    keeps running (a job's result is handed to it) until ``done()``."""
    monkeypatch.setattr(owner_thread, "in_kernel", lambda: True)

    async def main() -> None:
        fn()
        for _ in range(2400):
            if done():
                return
            await asyncio.sleep(0.05)

    # a thread of its own: this one may run a loop already (a browser test's)
    kernel = threading.Thread(target=lambda: asyncio.run(main()), name="kernel")
    kernel.start()
    kernel.join(150)
    assert done(), "nothing came of the click"


def test_convert_plans_with_the_output_name_typed_with_the_click(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckpt_explorer.ui.components.convert import ConvertView

    app = AppState(checkpoint)
    assert app.browse.open("a.safetensors"), app.browse.error
    view = ConvertView(app)
    root = pn.panel(view)._render_model(Document(), RecordingComm())  # as a notebook draws it
    dest = next(m for m in root.references() if getattr(m, "placeholder", "").startswith("e.g."))
    plan = next(m for m in root.references() if getattr(m, "label", None) == "Plan")
    c = app.convert
    press = lambda: press_with(root, [(dest, "value", "typed-out")], plan)  # noqa: E731
    on_kernel_loop(monkeypatch, press, lambda: c.plan is not None or c.error)
    assert app.convert.plan is not None, app.convert.error
    assert str(app.convert.plan.destination).endswith("typed-out")


def test_compare_runs_with_the_tolerance_typed_with_the_click(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckpt_explorer.ui.components.compare import CompareView

    app = AppState(checkpoint)
    assert app.browse.open("a.safetensors"), app.browse.error
    app.compare.param.update(a="a.safetensors", b="b.safetensors")
    view = CompareView(app)
    root = pn.panel(view)._render_model(Document(), RecordingComm())  # as a notebook draws it
    atol = next(m for m in root.references() if getattr(m, "title", None) == "atol")
    run = next(m for m in root.references() if getattr(m, "label", None) == "Compare")
    c = app.compare
    press = lambda: press_with(root, [(atol, "value", 0.01)], run)  # noqa: E731
    on_kernel_loop(monkeypatch, press, lambda: c.result is not None or c.error)
    assert app.compare.result is not None, app.compare.error
    r = app.compare.result
    assert r.options["atol"] == 0.01
    assert r.equal and r.summary()["equal_within_tolerance"] == 1  # 0.001 apart: within 0.01
