"""Overview: format and evidence, size, parameter count, dtype breakdown, files and parts."""

from __future__ import annotations

import html
from typing import Any

import panel as pn

from ..state import AppState
from .common import (
    PALETTE,
    cards,
    fmt_bytes,
    fmt_count,
    html_pane,
    placeholder,
    plot,
    section,
    style_figure,
    table,
    watch,
)


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
        params = sum(r.numel for r in view.tensors)
        det = view.detection
        kpis = cards(
            [
                ("Format", view.family, det.detail or view.kind),
                ("Parameters", fmt_count(params), f"{params:,} elements"),
                ("Tensors", f"{len(view.tensors):,}", f"{fmt_bytes(view.tensor_bytes)} of data"),
                ("On disk", fmt_bytes(view.total_bytes), f"{len(view.files)} file(s)"),
                *(
                    [("Parts", str(len(view.parts)), ", ".join(view.parts)[:40])]
                    if view.parts
                    else []
                ),
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
        blocks: list[Any] = [kpis, row1]
        parts = b.frame("parts")
        if len(parts):
            blocks.append(
                section(
                    "Bundle parts",
                    table(parts),
                )
            )
        blocks.append(
            section(
                f"Files ({len(files)})",
                table(
                    files.drop(columns=["size"]),
                    pagination="local" if len(files) > 20 else None,
                    page_size=20,
                ),
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

    @staticmethod
    def _dtype_chart(df: Any) -> pn.viewable.Viewable:
        import plotly.graph_objects as go

        if not len(df):
            return placeholder("No tensors.")
        fig = go.Figure(
            go.Pie(
                labels=df["dtype"],
                values=df["bytes"],
                hole=0.55,
                marker={"colors": PALETTE},
                customdata=df[["tensors", "numel"]],
                texttemplate="%{label}<br>%{percent}",
                hovertemplate="%{label}: %{value:,} bytes<br>%{customdata[0]} tensors, "
                "%{customdata[1]:,} elements<extra></extra>",
                sort=False,
            )
        )
        style_figure(fig, height=280)
        fig.update_layout(showlegend=True, legend={"orientation": "v", "x": 1.0, "y": 0.5})
        return plot(fig)

    def __panel__(self) -> pn.viewable.Viewable:
        return self._body
