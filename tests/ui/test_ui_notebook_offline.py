"""What a notebook page gets from the dashboard, without a browser: every custom model is
defined before the first display, and no later change links a stylesheet on Panel's CDN.
(tests/ui/test_ui_jupyterlab.py checks the same in a real JupyterLab.)"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from conftest import REPO

CDN = "cdn.holoviz.org"


def test_prepare_defines_every_custom_model_before_a_display() -> None:
    """In a fresh interpreter, ``prepare()`` alone makes the module tree's model one the next
    displayed document describes to the page (its definition is in the document's JSON)."""
    code = (
        "import json\n"
        "from bokeh.document import Document\n"
        "import panel as pn\n"
        "from ckpt_explorer.ui.notebook import prepare\n"
        "prepare()\n"
        "doc = Document(); doc.add_root(pn.Column('x').get_root(doc))\n"
        "print(json.dumps([d['name'] for d in doc.to_json(deferred=False).get('defs', [])]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    names = json.loads(out.stdout.strip().splitlines()[-1])
    for model in ("ModuleTree", "PathBox"):  # the custom models with properties
        assert any(n.startswith(model) for n in names), (model, names)


def _held_document(viewable: Any) -> tuple[Any, Any]:
    """``viewable`` drawn into a document as a notebook display leaves it: stylesheets inlined
    by Panel, changes held and combined until sent."""
    import panel as pn
    from bokeh.document import Document
    from bokeh.models.ui import UIElement
    from panel.io.notebook import patch_inline_stylesheets
    from panel.io.resources import set_resource_mode

    pn.extension(inline=True)
    doc = Document()
    with set_resource_mode("inline"):
        root = viewable.get_root(doc)
    doc.add_root(root)
    for model in root.select({"type": UIElement}):
        patch_inline_stylesheets(model)
    doc.hold("combine")
    return doc, root


def _sent(doc: Any) -> str:
    """The JSON of the changes the page would get now."""
    from bokeh.core.serialization import Serializer

    return json.dumps(Serializer(deferred=False).encode(doc.callbacks._held_events), default=str)


def test_later_changes_link_no_cdn_stylesheet() -> None:
    """A Markdown pane's new text and a pane added to a layout after display: Panel alone
    sends CDN stylesheet links with them; guarded, the page gets inline sheets only."""
    import panel as pn

    from ckpt_explorer.ui.notebook import keep_offline

    def change(guard: bool) -> str:
        md = pn.pane.Markdown("before")
        col = pn.Column(md)
        doc, root = _held_document(col)
        assert CDN not in json.dumps(doc.to_json(deferred=False))
        if guard:
            keep_offline(col)
        md.object = "after"
        md._update(root.ref["id"], md._models[root.ref["id"]][0])
        col.append(pn.pane.Markdown("added"))
        return _sent(doc)

    assert CDN in change(guard=False)  # the gap being closed
    sent = change(guard=True)
    assert "after" in sent and "added" in sent
    assert CDN not in sent


def test_no_change_is_queued_with_a_cdn_stylesheet() -> None:
    """Whichever moment the queue is sent (a job's thread updates the page while the kernel's
    does too), what is queued links no CDN sheet: each change is inlined before it is queued."""
    import panel as pn

    from ckpt_explorer.ui.notebook import keep_offline

    md = pn.pane.Markdown("before")
    col = pn.Column(md)
    doc, root = _held_document(col)
    keep_offline(col)
    guard = doc.callbacks.trigger_on_change
    queued: list[str] = []
    inner = guard.trigger

    def snapshot(event: Any) -> None:
        inner(event)
        queued.append(_sent(doc))  # what a send at this instant would carry

    guard.trigger = snapshot
    md.object = "after"
    md._update(root.ref["id"], md._models[root.ref["id"]][0])
    col.append(pn.pane.Markdown("added"))
    col.append(pn.Row(pn.pane.Markdown("nested"), pn.widgets.Button(label="b")))
    assert queued and "nested" in queued[-1]
    assert all(CDN not in q for q in queued)
