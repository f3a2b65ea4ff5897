"""Tensor detail: statistics, histogram and a 2-D slice of the selected tensor, on demand."""

from __future__ import annotations

import html
from typing import Any

import panel as pn

from ..numbers import fmt_int, fmt_number, plural
from ..state import BrowseState
from ..tables import shape_text
from ..tensor_stats import TensorDetail
from .common import ACCENT, cards, error_pane, placeholder, plot, style_figure, watch


def _num(x: float | int) -> str:
    return fmt_int(x) if isinstance(x, int) else fmt_number(x)


def sample_note(d: TensorDetail, progress: float) -> str:
    """What the figures shown come from while a large tensor's exact pass runs."""
    return (
        "<div style='color:#92400e;font-size:12px'>Figures from a sample of "
        f"{fmt_int(d.sampled)} of {fmt_int(int(d.stats['numel']))} elements (blocks spread "
        f"over the tensor); exact statistics: {progress:.0%} read</div>"
    )


class TensorDetailView(pn.viewable.Viewer):
    """Loads the selected tensor in the background; a spinner shows while it loads."""

    def __init__(self, browse: BrowseState, **params: Any) -> None:
        super().__init__(**params)
        self.browse = browse
        self._body = pn.Column(sizing_mode="stretch_both", scroll=True)
        self._exact = pn.indicators.Progress(
            value=0, max=1000, bar_color="primary", sizing_mode="stretch_width", height=8
        )
        self._note = pn.pane.HTML("", sizing_mode="stretch_width", css_classes=["sample-note"])
        watch(
            self.browse,
            lambda *_: self._render(),
            ["detail", "detail_loading", "detail_error", "view"],
        )
        watch(self.browse, lambda *_: self._on_progress(), "detail_progress")
        self._render()

    def _on_progress(self) -> None:
        d: TensorDetail | None = self.browse.detail
        if d is None or d.exact:
            return
        self._exact.value = int(self.browse.detail_progress * 1000)
        self._note.object = sample_note(d, self.browse.detail_progress)

    def _render(self) -> None:
        b = self.browse
        if b.detail_loading:
            self._body[:] = [
                pn.pane.Markdown(f"**{html.escape(b.selected)}**"),
                pn.Row(
                    pn.indicators.LoadingSpinner(value=True, size=36, color="primary"),
                    pn.pane.Markdown("reading values…", margin=(14, 8)),
                ),
            ]
            return
        if b.detail_error:
            self._body[:] = [error_pane(b.detail_error)]
            return
        d: TensorDetail | None = b.detail
        if d is None:
            self._body[:] = [placeholder("Select a row to see the tensor's values.")]
            return
        s = d.stats
        bad = int(s["nan"]) + int(s["inf"])
        header = pn.pane.HTML(
            f"<div style='font-weight:600;font-size:15px;word-break:break-all'>"
            f"{html.escape(d.name)}</div><div class='muted' style='color:#6b7280'>"
            f"{d.dtype} · {shape_text(d.shape)} · {plural(int(s['numel']), 'element')}</div>",
            sizing_mode="stretch_width",
            css_classes=["tensor-title"],
        )
        where = "" if d.exact else " in the sample"
        kpis = cards(
            [
                ("mean", _num(s["mean"]), f"std {_num(s['std'])}"),
                (
                    "min / max",
                    f"{_num(s['min'])} / {_num(s['max'])}",
                    f"L2 {_num(s['l2'])}" if d.exact else "L2 when every element is read",
                ),
                ("mean |x|", _num(s["mean_abs"]), f"zeros {_num(int(s['zeros']))}{where}"),
                (
                    "NaN / Inf",
                    f"{fmt_int(int(s['nan']))} / {fmt_int(int(s['inf']))}",
                    ("all finite" if not bad else "non-finite values!") + where,
                    "#10b981" if not bad else "#ef4444",
                ),
            ],
            compact=True,
        )
        blocks: list[Any] = [header]
        if not d.exact:  # figures of a sample until the exact pass has read every element
            self._exact.value = int(b.detail_progress * 1000)
            self._note.object = sample_note(d, b.detail_progress)
            blocks += [self._note, self._exact]
        blocks.append(kpis)
        if d.hist_counts:
            blocks.append(plot(self._histogram(d)))
        if d.heatmap is not None:
            blocks.append(plot(self._heatmap(d)))
        self._body[:] = blocks

    @staticmethod
    def _histogram(d: TensorDetail) -> Any:
        import plotly.graph_objects as go

        centers = [(a + b) / 2 for a, b in zip(d.hist_edges, d.hist_edges[1:], strict=False)]
        fig = go.Figure(go.Bar(x=centers, y=d.hist_counts, marker_color=ACCENT, opacity=0.85))
        fig.update_layout(bargap=0.02)
        note = "" if d.sampled >= int(d.stats["numel"]) else f" (sample of {fmt_int(d.sampled)})"
        return style_figure(fig, height=220, title=f"Histogram{note}")

    @staticmethod
    def _heatmap(d: TensorDetail) -> Any:
        import numpy as np
        import plotly.graph_objects as go

        z = np.asarray(d.heatmap, dtype=np.float64)  # one typed array, not 16k checked floats
        fig = go.Figure(go.Heatmap(z=z, colorscale="RdBu", zmid=0, showscale=True))
        fig.update_yaxes(autorange="reversed")
        return style_figure(fig, height=320, title=f"2-D slice {d.slice_label}")

    def __panel__(self) -> pn.viewable.Viewable:
        return self._body
