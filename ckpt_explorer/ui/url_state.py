"""The view in the URL, so a reload or a shared link reopens the same screen.

``?tab=Weight+map&ckpt=run/step-6000&filter=model.layers.2.&module=1&tensor=...`` holds the
open checkpoint, the weight map's filter and selected tensor; the view in front adds its own:

- Compare: ``a``, ``b``, ``atol``, ``rtol``, ``ab`` (the tensor shown A/B), ``changed=all``
  (every row, not the changed ones only) and ``result=1`` (a result was shown: run it again);
- Resume doctor: ``a``, ``b`` and ``result=1`` (diagnose again);
- Timeline: ``folder`` (the run folder), ``result=1`` (build it), ``pair`` (the pair
  selected), ``series`` (the tensor shown over steps), ``scale=log`` (the LR chart's axis),
  ``runs=a,b`` (the runs overlaid, when the folder holds several; none listed: all);
- any view with a main table: ``sort=<column>:<asc|desc>``.

Pure functions from state to query (:func:`query_of`) and back (:func:`apply_query`), and
:func:`bind_url` that keeps a served page's address in step.
"""

from __future__ import annotations

import math
from typing import Any

from .state import AppState
from .tabs import TABS

KEYS = (
    "tab",
    "ckpt",
    "filter",
    "module",
    "tensor",
    "a",
    "b",
    "atol",
    "rtol",
    "ab",
    "changed",
    "folder",
    "pair",
    "series",
    "scale",
    "runs",
    "sort",
    "result",
)
DIRECTIONS = ("asc", "desc")


def sort_text(sorters: list[dict[str, Any]] | None) -> str:
    """Tabulator's sorters as ``column:asc`` (the first, which orders the rows); "" if none."""
    for s in sorters or []:
        field, direction = str(s.get("field") or ""), s.get("dir", "asc")
        if field and direction in DIRECTIONS:
            return f"{field}:{direction}"
    return ""


def sorters_of(text: str) -> list[dict[str, str]]:
    """``column:desc`` as Tabulator's sorters (a bare column sorts ascending); [] if empty."""
    field, sep, direction = text.strip().rpartition(":")
    if not sep:
        field, direction = text.strip(), "asc"
    if not field or direction not in DIRECTIONS:
        return []
    return [{"field": field, "dir": direction}]


def number_text(x: float) -> str:
    """A tolerance as the shortest text that reads back as the same float ("" for 0)."""
    return repr(float(x)) if x else ""


def number_of(text: str) -> float | None:
    """A tolerance from the URL: a finite number ≥ 0, else None (ignored)."""
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) and x >= 0 else None


def _compare_query(state: AppState) -> dict[str, str]:
    c = state.compare
    shown = c.shown()
    return {
        "a": c.a,
        "b": c.b,
        "atol": number_text(c.atol),
        "rtol": number_text(c.rtol),
        "ab": (c.selected or c.want) if shown else "",
        "changed": "" if c.changed_only else "all",
        "result": "1" if shown else "",
    }


def _doctor_query(state: AppState) -> dict[str, str]:
    r = state.resume
    shown = (r.report_obj is not None or r.running) and tuple(r.examined) == (r.a, r.b)
    return {"a": r.a, "b": r.b, "result": "1" if shown and r.a and r.b else ""}


def _timeline_query(state: AppState) -> dict[str, str]:
    st, steps = state.timeline, state.steps
    shown = (st.timeline is not None or st.running) and bool(st.built) and st.built == st.run_dir
    pair = st.want_pair if st.want_pair is not None else st.pair if st.timeline else None
    series = steps.result is not None or steps.running or steps.want
    return {
        "folder": st.run_dir,
        "result": "1" if shown else "",
        "pair": str(pair) if shown and pair is not None else "",
        "series": steps.tensor if shown and series else "",
        "scale": "log" if st.lr_scale == "log" else "",
        "runs": runs_text(st) if shown else "",
    }


def runs_text(st: Any) -> str:
    """The runs overlaid as ``a,b`` (a link's ``runs``): the wanted ones while building,
    "" for a single run or when every run is overlaid (a link without ``runs`` shows all)."""
    if st.want_runs is not None:
        return ",".join(st.want_runs)
    found = st.runs_found
    if not found or list(st.runs) == found:
        return ""
    return ",".join(st.runs) if st.runs else ","


def runs_of(text: str) -> list[str]:
    """``a,b`` as run names (``,`` alone: none)."""
    return [r for r in text.split(",") if r]


VIEW_QUERIES = {
    "Compare": _compare_query,
    "Resume doctor": _doctor_query,
    "Timeline": _timeline_query,
}


def query_of(state: AppState) -> dict[str, str]:
    """The query that reopens what ``state`` shows (empty values left out)."""
    b = state.browse
    q = {
        "tab": state.active if state.active != TABS[0] else "",
        "ckpt": b.path,
        "filter": b.name_filter,
        "module": "1" if b.name_prefix and b.name_filter else "",
        "tensor": b.selected,
    }
    view = VIEW_QUERIES.get(state.active)
    if view is not None:
        q.update(view(state))
    q["sort"] = sort_text(state.sorts.get(state.active))
    return {k: q[k] for k in KEYS if q.get(k)}


def _apply_compare(state: AppState, query: dict[str, str]) -> None:
    c = state.compare
    upd: dict[str, Any] = {side: query[side] for side in ("a", "b") if query.get(side)}
    for key in ("atol", "rtol"):
        x = number_of(query.get(key, ""))
        if x is not None:
            upd[key] = x
    upd["changed_only"] = query.get("changed") != "all"
    c.param.update(**upd)
    if query.get("result") == "1" and c.a and c.b and not c.running:
        c.want = query.get("ab", "")
        c.run()


def _apply_doctor(state: AppState, query: dict[str, str]) -> None:
    r = state.resume
    r.param.update(**{side: query[side] for side in ("a", "b") if query.get(side)})
    if query.get("result") == "1" and r.a and r.b and not r.running:
        r.run()


def _apply_timeline(state: AppState, query: dict[str, str]) -> None:
    st, steps = state.timeline, state.steps
    if query.get("folder"):
        st.run_dir = query["folder"]
    st.lr_scale = "log" if query.get("scale") == "log" else "linear"
    if query.get("result") == "1" and st.run_dir:
        pair = query.get("pair", "")
        st.want_pair = int(pair) if pair.isdigit() else None
        if query.get("series"):
            steps.param.update(tensor=query["series"], want=True)
        st.want_runs = runs_of(query["runs"]) if query.get("runs") else None
        st.build()


def apply_query(state: AppState, query: dict[str, str]) -> None:
    """Show what ``query`` says: open its checkpoint, set its filter, select its tensor, set
    the view's own inputs and run again what it had shown, bring its tab to the front.
    Unknown tabs, tensors and values are ignored; a checkpoint that does not open shows its
    error as any open does."""
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
    tab = query.get("tab", "")
    tab = tab if tab in TABS else ""
    if tab == "Resume doctor":
        _apply_doctor(state, query)
    elif tab == "Timeline":
        _apply_timeline(state, query)
    elif tab == "Compare" or query.get("a") or query.get("b"):
        _apply_compare(state, query)
    sorters = sorters_of(query.get("sort", ""))
    if sorters:
        state.sorts = {**state.sorts, tab or TABS[0]: sorters}
    if tab:
        state.active = tab


def session_query(args: dict[str, list[bytes]]) -> dict[str, str]:
    """Panel's ``session_args`` (lists of bytes) as one text value per known key."""
    out = {}
    for k in KEYS:
        if args.get(k):
            out[k] = args[k][0].decode("utf-8", "replace")
    return out


def search_of(query: dict[str, str]) -> str:
    """``?k=v&...`` in :data:`KEYS` order ("" for an empty query)."""
    return "?" + "&".join(f"{k}={_quote(query[k])}" for k in KEYS if k in query) if query else ""


def bind_url(state: AppState) -> None:
    """In a served page: apply the address's query now, and rewrite it as the view changes."""
    import panel as pn

    from .components.common import in_session

    if pn.state.curdoc is None or pn.state.curdoc.session_context is None:
        return
    apply_query(state, session_query(pn.state.session_args or {}))
    location = pn.state.location
    if location is None:
        return

    def update(*_: Any) -> None:
        # every key is written: one that is now empty is cleared from the address
        search = search_of(query_of(state))
        if location.search != search:
            location.search = search

    later = in_session(update)  # jobs end in their own threads; the address is the page's
    state.param.watch(later, ["active", "sorts"])
    state.browse.param.watch(later, ["path", "name_filter", "name_prefix", "selected"])
    watched = (
        (state.compare, ["a", "b", "atol", "rtol", "changed_only", "selected", "result"]),
        (state.resume, ["a", "b", "report_obj", "examined"]),
        (state.timeline, ["run_dir", "built", "timeline", "pair", "lr_scale", "runs"]),
        (state.steps, ["tensor", "result"]),
    )
    for obj, names in watched:
        obj.param.watch(later, [*names, "running"])


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="/")
