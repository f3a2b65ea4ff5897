"""The view in the URL: tab, checkpoint, filter and selected tensor, so a link reopens it.

``?tab=Weight+map&ckpt=run/step-6000&filter=model.layers.2.&module=1&tensor=...`` (and
``a``/``b``: Compare's checkpoints); pure
functions from state to query and back, and :func:`bind_url` that keeps a page's address in
step (served pages only).
"""

from __future__ import annotations

from typing import Any

from .state import AppState
from .views import TABS

KEYS = ("tab", "ckpt", "filter", "module", "tensor", "a", "b")


def query_of(state: AppState) -> dict[str, str]:
    """The query that reopens what ``state`` shows (empty values left out)."""
    b = state.browse
    q = {
        "tab": state.active if state.active != TABS[0] else "",
        "ckpt": b.path,
        "filter": b.name_filter,
        "module": "1" if b.name_prefix and b.name_filter else "",
        "tensor": b.selected,
        "a": state.compare.a if state.active == "Compare" else "",
        "b": state.compare.b if state.active == "Compare" else "",
    }
    return {k: v for k, v in q.items() if v}


def apply_query(state: AppState, query: dict[str, str]) -> None:
    """Show what ``query`` says: open its checkpoint, set its filter, select its tensor, bring
    its tab to the front. Unknown tabs and tensors are ignored; a checkpoint that does not
    open shows its error as any open does."""
    b = state.browse
    ckpt = query.get("ckpt", "").strip()
    if ckpt and ckpt != b.path and not b.open(ckpt):
        return
    if "filter" in query:
        if query.get("module") == "1":
            b.filter_module(query["filter"])
        else:
            b.filter_text(name=query["filter"])
    tensor = query.get("tensor", "")
    if tensor and b.view is not None and tensor in b.view:
        b.select(tensor)
    for side in ("a", "b"):
        if query.get(side):
            setattr(state.compare, side, query[side])
    if query.get("tab") in TABS:
        state.active = query["tab"]


def session_query(args: dict[str, list[bytes]]) -> dict[str, str]:
    """Panel's ``session_args`` (lists of bytes) as one text value per known key."""
    out = {}
    for k in KEYS:
        if args.get(k):
            out[k] = args[k][0].decode("utf-8", "replace")
    return out


def bind_url(state: AppState) -> None:
    """In a served page: apply the address's query now, and rewrite it as the view changes."""
    import panel as pn

    if pn.state.curdoc is None or pn.state.curdoc.session_context is None:
        return
    apply_query(state, session_query(pn.state.session_args or {}))
    location = pn.state.location
    if location is None:
        return

    def update(*_: Any) -> None:
        q = query_of(state)
        # every key is written: one that is now empty is cleared from the address
        location.search = "?" + "&".join(f"{k}={_quote(q[k])}" for k in KEYS if k in q) if q else ""

    state.param.watch(update, "active")
    state.browse.param.watch(update, ["path", "name_filter", "name_prefix", "selected"])
    state.compare.param.watch(update, ["a", "b"])


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="/")
