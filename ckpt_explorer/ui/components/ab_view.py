"""The A/B tensor view: a Compare row's tensor in A and B, side by side on one scale."""

from __future__ import annotations

import html
import itertools
from typing import Any

import panel as pn

from ..ab_detail import ABDetail
from ..job_states import CompareState
from ..numbers import fmt_number
from ..tables import shape_text
from .common import ACCENT, PALETTE, error_pane, placeholder, plot, style_figure, watch


def _centers(edges: list[float]) -> list[float]:
    return [(a + b) / 2 for a, b in itertools.pairwise(edges)]


def histograms_figure(d: ABDetail) -> Any:
    """A's and B's histograms overlaid on common bins."""
    import plotly.graph_objects as go

    x = _centers(d.edges)
    fig = go.Figure()
    fig.add_bar(x=x, y=d.counts_a, name="A", marker_color=ACCENT, opacity=0.55)
    fig.add_bar(x=x, y=d.counts_b, name="B", marker_color=PALETTE[3], opacity=0.55)
    fig.update_layout(barmode="overlay", bargap=0.02)
    return style_figure(fig, height=260, title="Histograms of A and B (same bins)")


def diff_histogram_figure(d: ABDetail) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure(
        go.Bar(x=_centers(d.diff_edges), y=d.diff_counts, marker_color=PALETTE[4], name="A − B")
    )
    fig.update_layout(bargap=0.02)
    return style_figure(fig, height=260, title="Histogram of A − B")


def slices_figure(d: ABDetail) -> Any:
    """The 2-D slice of A, B and A − B as three heatmaps with one colour scale (±zmax)."""
    from plotly.subplots import make_subplots

    panels = [("A", d.slice_a), ("B", d.slice_b), ("A − B", d.slice_diff)]
    panels = [(t, z) for t, z in panels if z is not None]
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[t for t, _ in panels])
    zmax = d.zmax or 1.0
    for i, (_, z) in enumerate(panels, 1):
        fig.add_heatmap(
            z=z,
            zmin=-zmax,
            zmax=zmax,
            colorscale="RdBu",
            showscale=i == len(panels),
            row=1,
            col=i,
        )
        fig.update_yaxes(autorange="reversed", row=1, col=i)
    return style_figure(fig, height=300, title=f"2-D slice {d.slice_label}, one colour scale")


def norms_figure(d: ABDetail) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.add_scatter(y=d.row_norms, mode="lines", name="per row")
    fig.add_scatter(y=d.col_norms, mode="lines", name="per column")
    fig.update_xaxes(title="index in the slice", tickformat="d")
    return style_figure(fig, height=240, title="‖A − B‖ per row and column of the slice")


class ABView(pn.viewable.Viewer):
    """Renders :class:`CompareState`'s ``ab`` (loading, error, or the figures)."""

    def __init__(self, compare: CompareState, **params: Any) -> None:
        super().__init__(**params)
        self.compare = compare
        self._body = pn.Column(sizing_mode="stretch_width", css_classes=["ab-view"])
        watch(compare, lambda *_: self._render(), ["ab", "ab_loading", "ab_error", "selected"])
        self._render()

    def _render(self) -> None:
        c = self.compare
        if c.ab_error:
            self._body[:] = [error_pane(c.ab_error)]
            return
        if c.ab_loading:
            self._body[:] = [
                pn.Row(
                    pn.indicators.LoadingSpinner(value=True, size=30, color="primary"),
                    pn.pane.Markdown(f"reading **{html.escape(c.selected)}** in A and B…"),
                )
            ]
            return
        d: ABDetail | None = c.ab
        if d is None:
            self._body[:] = [placeholder("Click a row to see that tensor in A and B.")]
            return
        diff = f"max |A − B| {fmt_number(d.max_abs)}" if d.max_abs is not None else ""
        shapes = f"A {shape_text(d.shape_a)}, B {shape_text(d.shape_b)}"
        # a tensor's title card, alike in shape with tensor_detail's; the lines shown differ
        title = pn.pane.HTML(
            f"<div style='font-weight:600;word-break:break-all'>{html.escape(d.name)}</div>"
            f"<div style='color:#6b7280'>{html.escape(shapes)}"
            f"{' · ' + html.escape(diff) if diff else ''}</div>",
            sizing_mode="stretch_width",
            css_classes=["ab-title"],
        )
        blocks: list[Any] = [title]
        row = []
        if d.edges:
            row.append(plot(histograms_figure(d)))
        if d.diff_edges:
            row.append(plot(diff_histogram_figure(d)))
        if row:
            blocks.append(pn.Row(*row, sizing_mode="stretch_width"))
        if d.slice_a is not None:
            blocks.append(plot(slices_figure(d)))
        if d.row_norms:
            blocks.append(plot(norms_figure(d)))
        self._body[:] = blocks

    def __panel__(self) -> pn.viewable.Viewable:
        return self._body
