"""The Overview's "Who can load this" card: each modeled loader's verdict on the open
checkpoint (:func:`ckpt_explorer.loadable.loader_table`)."""

from __future__ import annotations

import html
from typing import Any

import panel as pn

from ...loadable import has_table, loader_table
from ..view_cache import memo
from .common import html_pane, section

_MARK = {
    "loads": ("✓", "#15803d"),
    "fails": ("✗", "#b91c1c"),
    "silent": ("∅", "#b45309"),
    "cannot_tell": ("?", "#6b7280"),
}


def loader_rows(view: Any) -> list[dict[str, Any]]:
    """One row per verdict: target, loader, outcome, meant, what it says (no widgets)."""
    if not has_table(view.path):
        return []
    table = loader_table(view.path)
    return [
        {
            "target": v.target or ".",
            "loader": v.label,
            "outcome": v.outcome,
            "meant": v.meant,
            "says": (f"{v.error}: {v.message}" if v.error else v.message) if not v.ok else "",
        }
        for v in table.verdicts
    ] + [
        {
            "target": c.target or ".",
            "loader": "conflict",
            "outcome": "warning",
            "meant": False,
            "says": c.message,
        }
        for c in table.conflicts
    ]


def loaders_block(view: Any) -> list[pn.viewable.Viewable]:
    """The card as a list of zero or one section (none when no loader applies)."""
    rows = memo(view, "loader_rows", lambda: loader_rows(view))
    if not rows:
        return []
    items = []
    for r in rows:
        mark, colour = _MARK.get(r["outcome"], ("⚠", "#b45309"))
        meant = " <b>(written for it)</b>" if r["meant"] else ""
        says = f"<br><small>{html.escape(r['says'][:300])}</small>" if r["says"] else ""
        where = f"{html.escape(r['target'])}: " if r["target"] != "." else ""
        items.append(
            f"<li><span style='color:{colour}'>{mark}</span> {where}"
            f"{html.escape(r['loader'])}{meant}{says}</li>"
        )
    body = html_pane(
        # each line has its own mark (✓ loads, ✗ fails, ∅ silent, ? cannot tell): no bullet
        "<ul class='verdicts'>" + "".join(items) + "</ul>",
        sizing_mode="stretch_width",
    )
    return [section("Who can load this", body)]
