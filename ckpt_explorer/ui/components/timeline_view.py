"""Timeline: a run folder's checkpoints over time, and where training went wrong.

A layer x step heatmap of update ratios ‖Δ‖/‖W‖ (log colour scale), the LR, optimizer moment
norms and step counters per checkpoint, the anomalies marked on every plot and listed in a
table. Clicking a heatmap cell (or "Compare this pair") opens Compare on that pair. A folder of
several runs overlays the chosen runs' LR, moment norms and step counters (one colour per run,
a legend entry per run, a multi-select of the runs); the rest shows the first run chosen.
Everything shown is :func:`ckpt_explorer.timeline.build_timeline`'s :class:`Timeline`.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import panel as pn

from ..numbers import fmt_number, plural
from ..state import AppState
from ..timeline_state import default_run_dir, natural_key, run_beside

# (the common widget helpers every view imports: alike with compare.py's list, names only)
from .common import (
    BAD,
    SEVERITY_COLOURS,
    Drawn,
    cancel_button,
    cards,
    job_bar,
    on_press,
    placeholder,
    plot,
    section,
    show_job,
    style_figure,
    sync,
    table,
    watch,
)
from .picker import PathPicker
from .runs_chart import run_colours, runs_figure, value_range
from .tensor_steps import TITLE, TensorStepsView

MARK_COLOURS = {"error": BAD, "warning": "#f59e0b", "info": "#0ea5e9"}
SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
ANOMALY_COLUMNS = ["step", "kind", "severity", "message", "checkpoint", "evidence"]
ZERO_BELOW = 2.0  # decades below the smallest ratio where "unchanged" (0) is drawn


def _ratio(v: Any) -> float | None:
    """A cached ratio may be ``"nan"``/``"inf"`` text (JSON); None stays None."""
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _step_text(step: Any, path: str) -> str:
    return fmt_number(step) if step is not None else Path(path).name


def by_step(anomalies: list[Any]) -> dict[int, list[Any]]:
    """Anomalies with a known step, grouped by step (worst first within a step)."""
    out: dict[int, list[Any]] = defaultdict(list)
    for a in anomalies:
        if a.step is not None:
            out[int(a.step)].append(a)
    return {s: sorted(v, key=lambda a: SEVERITY_RANK.get(a.severity, 9)) for s, v in out.items()}


def _mark(fig: Any, x: float, group: list[Any], width: float = 0.0) -> None:
    """A vertical marker (a line, or a column outline of ``width``) with the anomalies'
    kinds on top and their messages on hover."""
    colour = MARK_COLOURS.get(group[0].severity, "#6b7280")
    line = {"color": colour, "width": 2} if width else {"color": colour, "dash": "dash"}
    half = width / 2
    kind = "rect" if width else "line"
    fig.add_shape(type=kind, x0=x - half, x1=x + half, y0=0, y1=1, yref="paper", line=line)
    kinds = ", ".join(dict.fromkeys(a.kind for a in group))
    step = fmt_number(group[0].step)
    fig.add_annotation(
        x=x,
        y=1,
        yref="paper",
        yanchor="bottom",
        showarrow=False,
        text=f"⚠ {html.escape(kinds)}",
        hovertext="<br>".join(
            f"step {step} · {a.severity}: {html.escape(a.message)}" for a in group
        ),
        font={"size": 10, "color": colour},
        name=f"anomaly {step}",
    )


def heatmap_figure(t: Any) -> Any:
    """Layers (rows, in natural order) x pairs (columns: the update into each checkpoint);
    colour: log10 of ‖Δ‖/‖W‖, an unchanged layer drawn below the smallest ratio. The real
    ratio, the layer and the steps are on hover; ``customdata`` holds the ratios."""
    import plotly.graph_objects as go

    layers = sorted({k for p in t.pairs for k in p.layers}, key=natural_key)
    ratios = [[_ratio(p.layers.get(layer)) for p in t.pairs] for layer in layers]
    positive = [math.log10(r) for row in ratios for r in row if r and math.isfinite(r) and r > 0]
    lo = min(positive, default=-6.0)
    hi = max(positive, default=lo)
    zero_at, hot_at = lo - ZERO_BELOW, hi + 1.0
    z: list[list[float | None]] = []
    text: list[list[str]] = []
    for row in ratios:
        zr: list[float | None] = []
        tr: list[str] = []
        for r in row:
            if r is None:
                zr.append(None)
                tr.append("absent")
            elif not math.isfinite(r):
                zr.append(hot_at)
                tr.append(fmt_number(r))
            elif r <= 0:
                zr.append(zero_at)
                tr.append("0 (unchanged)")
            else:
                zr.append(math.log10(r))
                tr.append(fmt_number(r))
        z.append(zr)
        text.append(tr)
    steps = [
        f"{_step_text(p.step_a, p.path_a)} → {_step_text(p.step_b, p.path_b)}" for p in t.pairs
    ]
    cols = list(range(len(t.pairs)))
    ticks = list(range(math.floor(zero_at), math.ceil(hot_at) + 1))
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=cols,
            y=layers,
            text=text,
            customdata=[[steps[j] for j in cols] for _ in layers],
            hovertemplate="layer %{y}<br>steps %{customdata}<br>‖Δ‖/‖W‖ %{text}<extra></extra>",
            colorscale="Viridis",
            zmin=zero_at,
            zmax=hot_at,
            hoverongaps=False,
            colorbar={
                "title": {"text": "‖Δ‖/‖W‖"},
                "tickvals": ticks,
                "ticktext": [fmt_number(10.0**k) for k in ticks],
            },
            xgap=1,
            ygap=1,
        )
    )
    fig.update_xaxes(
        title="step (update from the previous checkpoint)",
        tickvals=cols,
        ticktext=[_step_text(p.step_b, p.path_b) for p in t.pairs],
        range=[-0.5, len(cols) - 0.5],
    )
    fig.update_yaxes(autorange="reversed", type="category")
    marks = by_step(t.anomalies)
    for j, p in enumerate(t.pairs):
        if p.step_b is not None and int(p.step_b) in marks:
            _mark(fig, j, marks[int(p.step_b)], width=1.0)
    style_figure(fig, height=min(900, max(280, 24 * len(layers) + 140)))
    fig.update_layout(margin={"t": 40})
    return fig


def lines_figure(
    t: Any, title: str, series: dict[str, list[Any]], y_title: str, log_y: bool = False
) -> Any:
    """One line per series over the checkpoints' steps, anomalies marked at their steps."""
    import plotly.graph_objects as go

    steps = t.series()["steps"]
    fig = go.Figure()
    shown: list[float] = []
    for name, values in series.items():
        pts = [(s, v) for s, v in zip(steps, values, strict=False) if s is not None]
        pts = [(s, _ratio(v)) for s, v in pts]
        if log_y:
            pts = [(s, v) for s, v in pts if v is not None and v > 0 and math.isfinite(v)]
        one = sum(v is not None for _, v in pts) == 1  # a lone point says its value
        fig.add_scatter(
            x=[s for s, _ in pts],
            y=[v for _, v in pts],
            text=[fmt_number(v) if v is not None else "none" for _, v in pts],
            mode="markers+text" if one else "lines+markers",
            textposition="top center",
            name=name,
            hovertemplate=f"{html.escape(name)}<br>step %{{x}}<br>%{{text}}<extra></extra>",
        )
        shown += [v for _, v in pts if v is not None and math.isfinite(v)]
    for step, group in by_step(t.anomalies).items():
        _mark(fig, step, group)
    fig.update_xaxes(title="step", tickformat="d")  # steps are integers: no 6.5 between 6 and 7
    if steps and len({s for s in steps if s is not None}) <= 12:
        fig.update_xaxes(tickmode="array", tickvals=sorted({s for s in steps if s is not None}))
    fig.update_yaxes(title=y_title, type="log" if log_y else "linear", exponentformat="e")
    flat = value_range(shown, log_y)
    if flat is not None:
        fig.update_yaxes(range=flat)
    style_figure(fig, height=300, title=title)
    fig.update_layout(margin={"t": 60})
    return fig


COUNTERS = {"optimizer step": "opt_step", "scheduler step": "sched_step"}


def scalars(series: dict[str, Any], key: str) -> dict[str, list[Any]]:
    """A chart's lines from a timeline's series: ``lr`` and ``moments`` (per group) or
    ``counters`` (the optimizer's and the scheduler's step counts)."""
    if key == "counters":
        return {name: series[k] for name, k in COUNTERS.items()}
    return dict(series[key])


def anomaly_frame(t: Any) -> Any:
    """The anomalies as table rows, in the timeline's order (step, errors first)."""
    import pandas as pd

    rows = [
        {
            "step": a.step,
            "kind": a.kind,
            "severity": a.severity,
            "message": a.message,
            "checkpoint": Path(a.path).name if a.path else "",
            "evidence": "; ".join(map(str, a.evidence)),
        }
        for a in t.anomalies
    ]
    return pd.DataFrame(rows, columns=ANOMALY_COLUMNS)


def _severity_style(row: Any) -> list[str]:
    colour = SEVERITY_COLOURS.get(str(row.get("severity", "")), "")
    return [f"background-color: {colour}" if colour else ""] * len(row)


# A Panel view's constructor (widgets, watches, body): alike in shape with the other views'.
class TimelineView(pn.viewable.Viewer):
    """A run folder in, its timeline out; a pair of checkpoints on to Compare."""

    def __init__(self, app: AppState, **params: Any) -> None:
        super().__init__(**params)
        self.app = app
        st = app.timeline
        self._auto = ""  # the run folder last filled in from the open checkpoint
        self._folder = PathPicker(app, "Run folder (holds checkpoint-N, step-N ...)")
        sync(st, "run_dir", self._folder, "value")
        self._build = pn.widgets.Button(label="Build", color="primary", width=110)
        on_press(self._build, st.build)
        self._cancel = cancel_button(st)
        self._progress = job_bar()
        self._status = pn.pane.Markdown("", sizing_mode="stretch_width")
        self._pair = pn.widgets.Select(label="Pair", options={}, width=360)
        self._pair.param.watch(lambda e: setattr(st, "pair", e.new or 0), "value")
        self._compare = pn.widgets.Button(label="Compare this pair", width=160, align="end")
        on_press(self._compare, self._compare_clicked)
        self._scale = pn.widgets.RadioButtonGroup(
            options=["linear", "log"], value=st.lr_scale, width=140, css_classes=["lr-scale"]
        )
        sync(st, "lr_scale", self._scale, "value")
        self._lr: pn.pane.Plotly | None = None
        watch(st, lambda *_: self._render_lr(), "lr_scale")
        self._runs = pn.widgets.MultiChoice(
            label="Runs overlaid", options=[], sizing_mode="stretch_width", css_classes=["runs"]
        )
        sync(st, "runs", self._runs, "value")
        watch(st, lambda *_: self._render(), "runs")
        self.heatmap: pn.pane.Plotly | None = None
        self._steps = TensorStepsView(app.steps)
        self._results = pn.Column(sizing_mode="stretch_width")
        self._drawn = Drawn()  # the timeline and runs the results show
        watch(st, self._on_progress, ["running", "progress", "message", "error"])
        watch(st, lambda *_: self._render(), "timeline")
        app.browse.param.watch(lambda *_: self._default_folder(), "path")
        self._default_folder()
        self._body = pn.Column(
            section(
                "Run",
                pn.Row(self._folder, self._build, self._cancel, sizing_mode="stretch_width"),
                pn.Column(self._progress, self._status, sizing_mode="stretch_width"),
            ),
            self._results,
            sizing_mode="stretch_width",
        )
        self._on_progress()
        self._render()

    def _default_folder(self) -> None:
        """The open checkpoint's run folder, unless the user typed another one."""
        st = self.app.timeline
        if st.run_dir and st.run_dir != self._auto:
            return
        self._auto = run_beside(self.app.guard.root, default_run_dir(self.app.browse.path))
        st.run_dir = self._auto

    def open_pair(self, index: int) -> bool:
        """Compare the pair ``index`` (A: the earlier checkpoint): set A and B, show the
        Compare view and start the diff; False (error shown) when there is no such pair."""
        st = self.app.timeline
        from ...errors import CkptExplorerError

        try:
            a, b = st.pair_paths(index)
        except CkptExplorerError as e:
            st.error = e.one_line()
            return False
        st.pair = index
        self.app.compare.param.update(a=a, b=b)
        self.app.active = "Compare"
        if not self.app.compare.running:
            self.app.compare.run()
        return True

    def _compare_clicked(self, *_: Any) -> None:
        self.open_pair(self.app.timeline.pair)

    def _on_click(self, event: Any) -> None:
        points = (event.new or {}).get("points") or []
        if points and isinstance(points[0].get("x"), int | float):
            self.open_pair(round(points[0]["x"]))

    def _on_progress(self, *_: Any) -> None:
        show_job(
            self.app.timeline,
            self._progress,
            self._build,
            self._cancel,
            self._status,
            self._results,
            self._drawn,
        )

    def _render(self) -> None:
        st = self.app.timeline
        t = st.timeline
        if t is None:
            self._drawn.forget()
            if not st.error and not st.running:
                self._results[:] = [
                    placeholder("Choose the folder a training run saves its checkpoints in.")
                ]
            return
        if not self._drawn.new(t, st.run_timelines, tuple(st.runs)):
            return  # drawn already: the heatmap a click may be on stays
        n_err = sum(a.severity == "error" for a in t.anomalies)
        found: tuple[Any, ...] = ("Anomalies", fmt_number(len(t.anomalies)))
        found += (plural(n_err, "error"), BAD) if n_err else ("no error",)
        kpis = cards(
            [
                ("Checkpoints", fmt_number(len(t.checkpoints)), Path(t.run_dir).name),
                ("Pairs", fmt_number(len(t.pairs)), "consecutive"),
                found,
                ("From cache", fmt_number(t.stats.get("cached", 0)), "summaries reused"),
            ]
        )
        blocks: list[Any] = [kpis]
        if st.run_timelines:
            self._runs.options = st.runs_found
            self._runs.value = [r for r in st.runs_found if r in st.runs]
            blocks.insert(
                0,
                section(
                    f"Runs ({len(st.runs_found)}): LR, moments and step counters overlaid; "
                    f"heatmap, pairs and anomalies of {st.focus()}",
                    self._runs,
                ),
            )
        if t.pairs:
            self.heatmap = plot(heatmap_figure(t), name="timeline-heatmap")
            self.heatmap.param.watch(self._on_click, "click_data")
            want = st.pair if st.pair < len(t.pairs) else 0  # new options reset the value
            self._pair.options = {
                f"{_step_text(p.step_a, p.path_a)} → {_step_text(p.step_b, p.path_b)}  "
                f"({Path(p.path_a).name} → {Path(p.path_b).name})": i
                for i, p in enumerate(t.pairs)
            }
            self._pair.value = want
            blocks.append(
                section(
                    "Update ratio ‖Δ‖/‖W‖ per layer (click a cell to compare that pair)",
                    self.heatmap,
                    pn.Row(self._pair, self._compare),
                )
            )
        else:
            self.heatmap = None
            blocks.append(placeholder("One readable checkpoint: no pair to show updates for."))
        s = {r: tl.series() for r, tl in st.overlaid().items()}
        self._lr = None
        if any(v["lr"] for v in s.values()):
            self._lr = plot(self._lr_figure(), name="timeline-lr")
            blocks.append(section("Learning rate", self._scale, self._lr))
        if any(v["moments"] for v in s.values()):
            fig = self._scalars_figure("moments", "norm", log_y=True)
            blocks.append(section("Optimizer moment norms per group", plot(fig)))
        blocks.append(section(TITLE, self._steps))
        if any(v is not None for x in s.values() for k in COUNTERS.values() for v in x[k]):
            fig = self._scalars_figure("counters", "count")
            blocks.append(section("Step counters recorded in each checkpoint", plot(fig)))
        if t.anomalies:
            tbl = table(anomaly_frame(t), pagination="local", page_size=15)
            tbl.style.apply(_severity_style, axis=1)  # type: ignore[union-attr]
            blocks.append(section(f"Anomalies ({len(t.anomalies)})", tbl))
        else:
            blocks.append(pn.pane.Alert("No anomaly found in this run.", alert_type="success"))
        bad = [c for c in t.checkpoints if c.error is not None]
        if bad:
            import pandas as pd

            df = pd.DataFrame([{"checkpoint": Path(c.path).name, "error": c.error} for c in bad])
            blocks.append(section("Unreadable checkpoints", table(df)))
        self._results[:] = blocks

    def _scalars_figure(self, key: str, y_title: str, log_y: bool = False) -> Any:
        """``key`` (``lr``, ``moments`` or ``counters``) over steps: the timeline's lines, or
        with several runs one colour per run overlaid, the first run's anomalies marked."""
        st = self.app.timeline
        t = st.timeline
        if not st.run_timelines:
            return lines_figure(t, "", scalars(t.series(), key), y_title, log_y=log_y)
        runs = st.overlaid()
        per_run = {r: tl.series() for r, tl in runs.items()}
        fig = runs_figure(
            {r: scalars(v, key) for r, v in per_run.items()},
            {r: v["steps"] for r, v in per_run.items()},
            run_colours(st.runs_found),
            y_title,
            log_y=log_y,
        )
        if st.focus() in runs:
            for step, group in by_step(t.anomalies).items():
                _mark(fig, step, group)
        return fig

    def _lr_figure(self) -> Any:
        """The learning rate over steps, on the y axis chosen (linear or log)."""
        return self._scalars_figure("lr", "lr", log_y=self.app.timeline.lr_scale == "log")

    def _render_lr(self) -> None:
        if self._lr is not None and self.app.timeline.timeline is not None:
            self._lr.object = self._lr_figure()

    def __panel__(self) -> pn.viewable.Viewable:
        return self._body
