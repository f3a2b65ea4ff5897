"""Scalars of several runs over steps on one chart, as TensorBoard overlays its runs.

One colour per run (fixed by the run's place among all the runs found, so hiding one keeps
the others' colours), one dash style per series within a run (``group 0``, ``group 1`` ...),
one legend entry per run: clicking it shows or hides all of that run's lines. The hover says
the run, the series, the step and the value.
"""

from __future__ import annotations

import html
import math
from typing import Any

from ..numbers import fmt_number
from .common import PALETTE, style_figure

DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def run_colours(runs: list[str]) -> dict[str, str]:
    """Run name -> its colour, by the run's place in ``runs`` (all runs found, in order)."""
    return {r: PALETTE[i % len(PALETTE)] for i, r in enumerate(runs)}


def _finite(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def value_range(values: list[float], log_y: bool) -> list[float] | None:
    """A y range for values that are all one value (plotly would centre an arbitrary range
    on it, −0.5…1 for 3e-4): from zero to above it (a decade either side on a log axis);
    None when the values spread (autorange shows them)."""
    if not values or max(values) != min(values):
        return None
    v = values[0]
    if log_y:
        return [math.log10(v) - 1, math.log10(v) + 1]
    if v == 0:
        return [-1.0, 1.0]
    return [min(0.0, 1.25 * v), max(0.0, 1.25 * v)]


def runs_figure(
    series: dict[str, dict[str, list[Any]]],
    steps: dict[str, list[Any]],
    colours: dict[str, str],
    y_title: str,
    log_y: bool = False,
) -> Any:
    """``series[run][name]`` (values per checkpoint, at ``steps[run]``) as lines over steps:
    a run's lines share its colour and one legend entry (its name); a lone point says its
    value; points without a step, and non-positive ones on a log axis, are left out."""
    import plotly.graph_objects as go

    names = sorted({n for per_run in series.values() for n in per_run})
    fig = go.Figure()
    shown: list[float] = []
    all_steps: set[int] = set()
    for run, per_run in series.items():
        first = True
        for name, values in per_run.items():
            pts: list[tuple[Any, float]] = []
            for s, v in zip(steps[run], values, strict=False):
                x = _finite(v)
                if s is not None and x is not None and (x > 0 or not log_y):
                    pts.append((s, x))
            if not pts:
                continue
            one = len(pts) == 1
            label = html.escape(run) + (f" · {html.escape(name)}" if len(names) > 1 else "")
            fig.add_scatter(
                x=[s for s, _ in pts],
                y=[v for _, v in pts],
                text=[fmt_number(v) for _, v in pts],
                mode="markers+text" if one else "lines+markers",
                textposition="top center",
                name=run,
                legendgroup=run,
                showlegend=first,
                line={"color": colours.get(run), "dash": DASHES[names.index(name) % len(DASHES)]},
                marker={"color": colours.get(run)},
                hovertemplate=f"run {label}<br>step %{{x}}<br>%{{text}}<extra></extra>",
            )
            first = False
            shown += [v for _, v in pts]
            all_steps.update(int(s) for s, _ in pts)
    fig.update_xaxes(title="step", tickformat="d")
    if all_steps and len(all_steps) <= 12:
        fig.update_xaxes(tickmode="array", tickvals=sorted(all_steps))
    fig.update_yaxes(title=y_title, type="log" if log_y else "linear", exponentformat="e")
    flat = value_range(shown, log_y)
    if flat is not None:
        fig.update_yaxes(range=flat)
    style_figure(fig, height=320)
    fig.update_layout(
        margin={"t": 30},
        showlegend=True,
        legend={"title": {"text": "run"}, "groupclick": "togglegroup"},
    )
    return fig
