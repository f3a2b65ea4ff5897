"""Overview: format and evidence, size, parameter count, dtype breakdown, files and parts."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import pandas as pd
import panel as pn

from ...fit.writer_clues import writer_clues
from ...fit.written_by import view_clues
from ...security import view_security_findings
from ..state import AppState
from ..tables import model_parameter_count
from ..view_cache import memo
from .common import (
    PALETTE,
    cards,
    fit_list,
    fmt_bytes,
    fmt_count,
    html_pane,
    later,
    placeholder,
    section,
    table,
    watch,
)
from .export import export_buttons, export_name
from .loaders import loaders_block
from .svg_chart import CHART_CSS, donut


def parameters_card(view: Any) -> tuple[str, str, str]:
    """(title, value, subtitle): the model's parameter count, never optimizer moments."""
    counted = model_parameter_count(view)
    if counted is None:
        return ("Parameters", "—", f"no model part in this {view.kind}")
    n, parts = counted
    where = f" in {', '.join(parts)}" if parts else ""
    return ("Parameters", fmt_count(n), f"{n:,} elements{where}"[:60])


def written_by_card(clues: Sequence[Any], writer: Sequence[Any] = ()) -> tuple[str, str, str]:
    """(title, value, subtitle): the layout that wrote the checkpoint where its files show it
    (``fit.written_by``), else what they say of the program that wrote them
    (``fit.writer_clues``: a transformers version, HF shard names, header metadata); when they
    say neither, that plainly, never a guess."""
    if clues:
        value = ", ".join(f"{c.fact} {c.value}" for c in clues)
        return ("Written by", value[:40], clues[0].evidence[:60])
    if writer:
        who = next((c for c in writer if c.fact == "writer"), writer[0])
        rest = [c for c in writer if c is not who and c.fact == "shards"]
        sub = who.evidence + (f"; {rest[0].value}" if rest else "")
        return ("Written by", who.value[:40], sub[:80])
    return (
        "Written by",
        "not recorded",
        "the files name no writer: no config version, rank or stage names, padding",
    )


def security_findings(view: Any) -> list[Any]:
    """The checkpoint's ``security.*`` findings (judged once per view)."""
    return memo(view, "security_findings", lambda: list(view_security_findings(view)))


def security_banner(view: Any, found: list[Any] | None = None) -> list[pn.pane.Alert]:
    """A red banner listing each ``security.*`` error of the checkpoint (none when clean)."""
    found = security_findings(view) if found is None else found
    errors = [f for f in found if f.severity == "error"]
    if not errors:
        return []
    rules = {f.rule for f in errors}
    if "security.code_execution" in rules:
        title = (
            "Unsafe: loading this checkpoint with torch.load(weights_only=False), pickle, "
            "numpy or joblib would run code"
        )
    elif "security.ships_code" in rules:
        title = (
            "Code: this checkpoint ships code that a library imports or runs when asked to "
            "(a Python module in its folder, trust_remote_code files, TorchScript); read it first"
        )
    elif "security.unverified" in rules:
        title = (
            "Unverified: parts of this checkpoint could not be proven safe to load (never "
            "called safe); load it only if you trust its source"
        )
    else:
        title = "This checkpoint breaks a default torch.load"
    items = "".join(
        f"<li><b>{html.escape(f.rule)}</b>: {html.escape(f.message)}</li>" for f in errors[:20]
    )
    more = f"<p>… and {len(errors) - 20} more (Validate lists all)</p>" if len(errors) > 20 else ""
    return [
        pn.pane.Alert(
            f"<b>{html.escape(title)}</b><ul>{items}</ul>{more}",
            alert_type="danger",
            sizing_mode="stretch_width",
            name="security-banner",
        )
    ]


class Overview(pn.viewable.Viewer):
    """What the open checkpoint is, and what it is made of."""

    def __init__(self, app: AppState, **params: Any) -> None:
        super().__init__(**params)
        self.app = app
        self._body = pn.Column(sizing_mode="stretch_width")
        watch(self.app.browse, lambda *_: self._render(), "view")
        self._render()

    def _render(self) -> None:
        b = self.app.browse
        view = b.view
        if view is None:
            self._body[:] = [placeholder("Open a checkpoint with the picker on the left.")]
            return
        det = view.detection
        clues = memo(view, "layout_clues", lambda: view_clues(view))
        writer = memo(view, "writer_clues", lambda: writer_clues(view))
        kpis = cards(
            [
                ("Format", view.family, det.detail or view.kind),
                parameters_card(view),
                ("Tensors", f"{len(view.tensors):,}", f"{fmt_bytes(view.tensor_bytes)} of data"),
                ("On disk", fmt_bytes(view.total_bytes), f"{len(view.files)} file(s)"),
                *(
                    [("Parts", str(len(view.parts)), fit_list(view.parts, 48))]
                    if view.parts
                    else []
                ),
                written_by_card(clues, writer),
            ]
        )
        evidence = html_pane(
            "<ul class='evidence'>"
            + "".join(f"<li>{html.escape(e)}</li>" for e in det.evidence)
            + "</ul>"
            + "".join(f"<p style='color:#b45309'>⚠ {html.escape(w)}</p>" for w in view.warnings),
            sizing_mode="stretch_width",
        )
        dtypes = b.frame("dtypes")
        files = b.frame("files")
        row1 = pn.Row(
            section(f"Why this is {view.family}", evidence, height=340),
            section("Data types (by bytes)", self._dtype_chart(dtypes), height=340),
            sizing_mode="stretch_width",
        )
        blocks: list[Any] = [kpis, *loaders_block(view), row1]
        if clues or writer:
            blocks.append(
                section(
                    "Who wrote it (what its files say)",
                    table(pd.DataFrame([c.to_json() for c in [*clues, *writer]])),
                )
            )
        parts = b.frame("parts")
        if len(parts):
            blocks.append(
                section(
                    "Bundle parts",
                    table(parts),
                )
            )
        files_table = table(
            files.drop(columns=["size"]),
            pagination="local" if len(files) > 20 else None,
            page_size=20,
        )
        blocks.append(
            section(
                f"Files ({len(files)})",
                export_buttons(files_table, export_name("files", b.path)),
                files_table,
            )
        )
        values = b.frame("values")
        if len(values):
            blocks.append(
                section(
                    f"Values ({len(values)}): steps, hyperparameters, scheduler fields",
                    table(values, pagination="local", page_size=12),
                )
            )
        self._body[:] = blocks

        def banner(found: list[Any]) -> None:  # on top, once every file is judged
            if self.app.browse.view is view:
                for b in reversed(security_banner(view, found)):
                    self._body.insert(0, b)

        later(lambda: security_findings(view), banner, "ckpt-explorer-security")

    @staticmethod
    def _dtype_chart(df: Any) -> pn.viewable.Viewable:
        if not len(df):
            return placeholder("No tensors.")
        hovers = [
            f"{d}: {b:,} bytes\n{t:,} tensors, {n:,} elements"
            for d, b, t, n in zip(df["dtype"], df["bytes"], df["tensors"], df["numel"], strict=True)
        ]
        chart = donut(list(df["dtype"]), list(df["bytes"]), hovers, PALETTE)
        return pn.pane.HTML(chart, stylesheets=[CHART_CSS], name="dtype-chart")

    def __panel__(self) -> pn.viewable.Viewable:
        return self._body
