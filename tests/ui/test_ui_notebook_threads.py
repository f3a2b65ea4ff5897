"""In a notebook a job's result reaches the page whatever the kernel's thread sends meanwhile.

In a notebook (no Bokeh server session) Panel sends each change of a widget to the browser
over the kernel's comm, from the thread that makes it, as three messages (header, metadata,
content). A job ends in its own thread; when the kernel's thread sent at the same time (the
browser's table page size, a click), the two interleaved their messages and raced on the
document's pending events: the browser dropped patches and a job's status said done while
its results kept their placeholder.

Here a real Validate view is drawn through a recording comm by a "kernel" thread running an
event loop that keeps changing a widget of the page, while Validate runs; a client document
(the browser's) applies every message in order and must end with the findings drawn.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import panel as pn
import pytest
from bokeh.document import Document


class RecordingComm:
    """A Jupyter comm as Panel uses it: every message sent, in order."""

    id = "comm"
    _comm = True

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, data: Any = None, buffers: Any = None) -> None:
        self.sent.append(data if buffers is None else buffers[0])

    def on_msg(self, *_: Any) -> None:
        pass


def apply_all(sent: list[Any], client: Document) -> list[str]:
    """Apply the messages ``sent`` to ``client`` in order, as the browser does (a message:
    header, metadata, content, then a ref and a payload per buffer); what failed."""
    from bokeh.protocol import Protocol

    errors, i = [], 0
    while i < len(sent):
        try:
            header = json.loads(sent[i])
            msg = Protocol().assemble(sent[i], sent[i + 1], sent[i + 2])
            for k in range(header.get("num_buffers", 0)):
                msg.assemble_buffer(json.loads(sent[i + 3 + 2 * k]), sent[i + 4 + 2 * k])
            i += 3 + 2 * header.get("num_buffers", 0)
            msg.apply_to_document(client)
        except Exception as e:
            errors.append(f"{type(e).__name__}: {str(e)[:120]}")
            i += 1  # a message cut by another: look for the next header
    return errors


@pytest.fixture
def often_switching() -> Iterator[None]:
    """Threads take turns often, so that a race between them shows within one test."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A checkpoint whose non-finite values Validate reports."""
    import torch
    from safetensors.torch import save_file

    w = torch.ones(16, 16)
    w[0, 0] = float("nan")
    save_file({"layer.w": w, "layer.b": torch.zeros(16)}, str(tmp_path / "model.safetensors"))
    return tmp_path


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> Any:
    """``fn()`` run by the kernel's loop (its thread), its result here."""

    async def call() -> Any:
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=120)


RUNS = 50


def test_a_validate_result_reaches_the_notebook_page_while_the_kernel_sends(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch, often_switching: None
) -> None:
    from ckpt_explorer.ui import owner_thread
    from ckpt_explorer.ui.components.validate import ValidateView
    from ckpt_explorer.ui.state import AppState

    monkeypatch.setattr(owner_thread, "in_kernel", lambda: True)  # this loop is the kernel's
    loop = asyncio.new_event_loop()
    kernel = threading.Thread(target=loop.run_forever, name="kernel", daemon=True)
    kernel.start()
    comm, doc = RecordingComm(), Document()
    busy = pn.Column()  # what the kernel keeps redrawing meanwhile (a click, a page size)
    done = threading.Event()
    failed: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda a: failed.append(repr(a.exc_value)))
    loop.set_exception_handler(lambda _, c: failed.append(repr(c.get("exception"))))

    def page() -> tuple[Any, Any]:
        app = AppState(checkpoint)
        assert app.browse.open("model.safetensors")
        view = ValidateView(app)
        pn.Column(busy, view)._render_model(doc, comm)
        doc.hold("combine")
        return app, view

    app, view = on_loop(loop, page)
    client = Document.from_json(doc.to_json())

    def send(i: int = 0) -> None:  # the kernel's own updates, one per turn of its loop
        busy.objects = [pn.pane.Markdown(f"k{i}")]
        if not done.is_set():
            loop.call_soon(send, i + 1)

    def validate() -> None:
        loop.call_soon(send)
        view._start()

    runs: list[int] = []

    def ended(e: Any) -> None:  # another run, until RUNS have ended
        if e.new:
            return
        runs.append(1)
        if len(runs) < RUNS:
            loop.call_soon_threadsafe(view._start)
        else:
            done.set()

    app.validate.param.watch(ended, "running")
    on_loop(loop, validate)
    assert done.wait(300)
    on_loop(loop, lambda: None)  # what the job left for the loop has run
    loop.call_soon_threadsafe(loop.stop)
    kernel.join(30)
    assert not failed, failed[:3]  # no thread died sending

    errors = apply_all(comm.sent, client)
    assert not errors, errors[:3]
    assert app.validate.findings is not None and len(app.validate.findings)
    texts = " ".join(str(getattr(m, "text", "")) for m in client.models)
    assert "press Validate" not in texts  # the placeholder is gone from the browser's page
    assert app.validate.message in texts  # the status line as the kernel last set it
    assert any(type(m).__name__ == "DataTabulator" for m in client.models)  # the findings


def test_a_half_imported_ipython_is_no_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A served page's thread asks while another thread is still importing IPython (the
    module is in ``sys.modules`` without ``get_ipython`` yet): no kernel, no error."""
    import types

    from ckpt_explorer.ui import owner_thread

    monkeypatch.setitem(sys.modules, "IPython", types.ModuleType("IPython"))
    assert owner_thread.in_kernel() is False
