"""One tensor over the run's steps (TensorBoard's histograms, from the checkpoints): a heatmap
of value bins x steps, the steps' histograms as curves offset by step, and the sample's
mean ± std, min and max per step."""

from __future__ import annotations

import itertools
from typing import Any

import panel as pn

from ...timeline.distribution import checkpoint_label
from ..distribution_state import DistributionState
from ..numbers import fmt_int, fmt_number, plural
from .common import (
    PALETTE,
    cancel_button,
    job_bar,
    on_press,
    placeholder,
    plot,
    show_job,
    style_figure,
    watch,
)
from .path_box import PathBox

TITLE = "One tensor over steps (its values at each checkpoint, on common bins)"


def _centers(edges: list[float]) -> list[float]:
    return [(a + b) / 2 for a, b in itertools.pairwise(edges)]


def heatmap_figure(d: Any) -> Any:
    """Bins (rows, values) x checkpoints (columns, in step order); colour: the share of the
    step's sampled values in the bin (blank: none, or the tensor missing there)."""
    import plotly.graph_objects as go

    labels = [checkpoint_label(s, p) for s, p in zip(d.steps, d.paths, strict=True)]
    centers = _centers(d.edges)
    z: list[list[float | None]] = [[None] * len(labels) for _ in centers]
    for j, counts in enumerate(d.counts):
        total = sum(counts)
        for i, c in enumerate(counts):
            z[i][j] = c / total if total and c else None
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=labels,
            y=centers,
            colorscale="Viridis",
            colorbar={"title": {"text": "share"}},
            hovertemplate="step %{x}<br>value ≈ %{y:.4g}<br>share %{z:.3g}<extra></extra>",
            hoverongaps=False,
        )
    )
    fig.update_xaxes(title="step", type="category")
    fig.update_yaxes(title="value", exponentformat="e")
    return style_figure(fig, height=360)


def ridges_figure(d: Any) -> Any:
    """Each step's histogram as a filled curve, offset upwards by its position in the run
    (the first step at the bottom), scaled so the tallest bin fills one row."""
    import plotly.graph_objects as go

    centers = _centers(d.edges)
    labels = [checkpoint_label(s, p) for s, p in zip(d.steps, d.paths, strict=True)]
    shares = [[c / sum(cs) for c in cs] if cs and sum(cs) else [] for cs in d.counts]
    top = max((max(s) for s in shares if s), default=1.0) or 1.0
    fig = go.Figure()
    for k, (label, s) in enumerate(zip(labels, shares, strict=True)):
        if not s:
            continue
        ys = [k + 0.9 * v / top for v in s]
        colour = PALETTE[k % len(PALETTE)]
        fig.add_scatter(
            x=[centers[0], *centers, centers[-1]],
            y=[k, *ys, k],
            mode="lines",
            fill="toself",
            line={"color": colour, "width": 1},
            name=f"step {label}",
            text=[label] * (len(centers) + 2),
            hovertemplate="step %{text}<br>value ≈ %{x:.4g}<extra></extra>",
        )
    fig.update_yaxes(
        title="step",
        tickvals=list(range(len(labels))),
        ticktext=labels,
        range=[-0.2, len(labels) + 0.2],
    )
    fig.update_xaxes(title="value", exponentformat="e")
    fig.update_layout(showlegend=False)
    return style_figure(fig, height=max(280, 24 * len(labels) + 120))


def stats_figure(d: Any) -> Any:
    """Mean ± std (a band), min and max of the sampled values at each step."""
    import plotly.graph_objects as go

    rows = [
        (checkpoint_label(s, p), st)
        for s, p, st in zip(d.steps, d.paths, d.stats, strict=True)
        if st.get("mean") is not None
    ]
    x = [r[0] for r in rows]
    mean = [r[1]["mean"] for r in rows]
    std = [r[1]["std"] for r in rows]
    fig = go.Figure()
    fig.add_scatter(
        x=x,
        y=[m + s for m, s in zip(mean, std, strict=True)],
        mode="lines",
        line={"width": 0},
        showlegend=False,
        hoverinfo="skip",
    )
    fig.add_scatter(
        x=x,
        y=[m - s for m, s in zip(mean, std, strict=True)],
        mode="lines",
        line={"width": 0},
        fill="tonexty",
        fillcolor="rgba(79,70,229,0.15)",
        name="± std",
    )
    # one add_scatter per line drawn: plotly keyword lists, alike only in shape
    fig.add_scatter(x=x, y=mean, mode="lines+markers", name="mean", line={"color": PALETTE[0]})
    fig.add_scatter(
        x=x,
        y=[r[1]["min"] for r in rows],
        mode="lines",
        name="min",
        line={"color": PALETTE[2], "dash": "dot"},
    )
    fig.add_scatter(
        x=x,
        y=[r[1]["max"] for r in rows],
        mode="lines",
        name="max",
        line={"color": PALETTE[4], "dash": "dot"},
    )
    fig.update_xaxes(title="step", type="category")
    fig.update_yaxes(title="value", exponentformat="e")
    return style_figure(fig, height=300)


def summary_line(d: Any) -> str:
    """``13 checkpoints · 65,536 of 1,048,576 elements sampled at each · missing in 1``."""
    read = [i for i, c in enumerate(d.counts) if c]
    parts = [plural(len(read), "checkpoint")]
    if read:
        i = read[-1]
        if d.sampled[i] < d.numel[i]:
            parts.append(
                f"{fmt_int(d.sampled[i])} of {fmt_int(d.numel[i])} elements sampled at each "
                "(blocks spread over the tensor)"
            )
        else:
            parts.append(f"all {fmt_int(d.numel[i])} elements")
        lo, hi = d.edges[0], d.edges[-1]
        parts.append(f"{len(d.edges) - 1} bins from {fmt_number(lo)} to {fmt_number(hi)}")
    if d.missing:
        parts.append(f"missing in {plural(len(d.missing), 'checkpoint')}")
    return " · ".join(parts)


class TensorStepsView(pn.viewable.Viewer):
    """The tensor box, Show / Cancel, progress, then the three figures."""

    def __init__(self, state: DistributionState, **params: Any) -> None:
        super().__init__(**params)
        self.state = state
        self._name = PathBox(
            label="Tensor",
            options=list(state.names),
            value=state.tensor,
            placeholder="a tensor of the run, e.g. model.layers.0.mlp.up_proj.weight",
            sizing_mode="stretch_width",
        )
        self._name.param.watch(lambda e: setattr(state, "tensor", e.new), "value")
        self._name.on_commit = lambda _text: state.run()
        self._show = pn.widgets.Button(label="Show", color="primary", width=90, align="end")
        on_press(self._show, state.run)
        self._cancel = cancel_button(state, align="end")
        self._progress = job_bar()
        self._status = pn.pane.Markdown("", sizing_mode="stretch_width")
        self._figures = pn.Column(sizing_mode="stretch_width")
        watch(state, self._on_names, ["names", "tensor"])
        watch(state, self._on_progress, ["running", "progress", "message", "error"])
        watch(state, lambda *_: self._render(), "result")
        self._body = pn.Column(
            pn.Row(self._name, self._show, self._cancel, sizing_mode="stretch_width"),
            self._progress,
            self._status,
            self._figures,
            sizing_mode="stretch_width",
            css_classes=["tensor-steps"],
        )
        self._on_progress()
        self._render()

    def _on_names(self, *_: Any) -> None:
        self._name.options = list(self.state.names)
        if self._name.value != self.state.tensor:
            self._name.value = self.state.tensor

    def _on_progress(self, *_: Any) -> None:
        show_job(self.state, self._progress, self._show, self._cancel, self._status, self._figures)

    def _render(self) -> None:
        d = self.state.result
        if d is None:
            if not self.state.error:
                self._figures[:] = [
                    placeholder("Pick a tensor and press Show: its values at every checkpoint.")
                ]
            return
        self._figures[:] = [
            pn.pane.Markdown(summary_line(d), css_classes=["steps-summary"]),
            plot(heatmap_figure(d), name="steps-heatmap"),
            pn.Row(
                plot(ridges_figure(d), name="steps-ridges"),
                plot(stats_figure(d), name="steps-stats"),
                sizing_mode="stretch_width",
            ),
        ]

    def __panel__(self) -> pn.viewable.Viewable:
        return self._body
