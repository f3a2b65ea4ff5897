"""Layout: will the open checkpoint load at a tp / pp / ep / ZeRO layout, and fit per GPU?

Everything shown is :mod:`ckpt_explorer.fit`'s report: the checks with their reasons, the
memory per GPU by kind and the tp x pp grid. A check the files do not decide is "unknown".
"""

from __future__ import annotations

import html
import textwrap
from typing import Any

import panel as pn

from ...inspect_report import human_bytes
from ..fit_state import FORM
from ..numbers import fmt_bytes, fmt_number, fmt_size_typed
from ..state import AppState
from ..subject import code
from .common import (
    BAD,
    GOOD,
    PALETTE,
    cards,
    error_pane,
    placeholder,
    plot,
    section,
    style_figure,
    table,
    watch,
)

UNKNOWN_COLOUR = "#9ca3af"
MARK = {True: "✓", False: "✗", None: "unknown"}
VERDICT = {True: "FITS", False: "DOES NOT FIT", None: "UNKNOWN"}
VERDICT_COLOUR = {True: GOOD, False: BAD, None: UNKNOWN_COLOUR}
Z = {True: 1.0, False: 0.0, None: 0.5}  # heatmap value of a cell
COLOURSCALE = [
    [0.0, BAD],
    [0.34, BAD],
    [0.34, UNKNOWN_COLOUR],
    [0.66, UNKNOWN_COLOUR],
    [0.66, GOOD],
    [1.0, GOOD],
]
MEMORY_KINDS = (
    ("weights", "weights"),
    ("gradients", "gradients"),
    ("master_weights", "fp32 master weights"),
    ("optimizer_moments", "Adam moments"),
)


def gpu_words(typed: str, n: int) -> str:
    """The GPU memory as the user typed it (``80 GB (74.5 GiB)``), else in binary units."""
    try:
        from ...fit import parse_size

        if typed.strip() and parse_size(typed) == n:
            return fmt_size_typed(typed, n)
    except ValueError:
        pass
    return fmt_bytes(n)


def share_words(part: int, whole: int) -> str:
    """``part`` as a percentage of ``whole`` with the digits it needs: ``0.0012 %``, ``3.5 %``
    (never ``0.00 %`` for a part that is not zero)."""
    if not part:
        return "0 %"
    return f"{fmt_number(float(f'{100 * part / whole:.2g}'))} %"


def _wrap(text: str, width: int = 90) -> str:
    return "<br>".join(html.escape(line) for line in textwrap.wrap(text, width) or [""])


def grid_matrix(grid: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> dict[str, Any]:
    """``fit``'s grid cells as heatmap matrices (rows tp, columns pp): ``tp``, ``pp``, ``z``,
    ``text`` (✓ / ✗ / unknown) and ``hover`` (verdict, memory per GPU and the reasons)."""
    tps = sorted({int(c["tp"]) for c in grid})
    pps = sorted({int(c["pp"]) for c in grid})
    at = {(int(c["tp"]), int(c["pp"])): c for c in grid}
    z, text, hover = [], [], []
    for tp in tps:
        zr, tr, hr = [], [], []
        for pp in pps:
            c = at.get((tp, pp))
            fits = None if c is None else c["fits"]
            reasons = [] if c is None else list(c.get("reasons") or [])
            mem = None if c is None else c.get("memory_total")
            head = f"<b>tp {tp} × pp {pp}: {VERDICT[fits].lower()}</b>"
            lines = [head]
            if mem is not None:
                lines.append(f"memory per GPU {human_bytes(int(mem))} (activations not counted)")
            lines += [_wrap(("✗ " if fits is False else "? ") + r) for r in reasons]
            zr.append(Z[fits])
            tr.append(MARK[fits])
            hr.append("<br>".join(lines))
        z.append(zr)
        text.append(tr)
        hover.append(hr)
    return {"tp": tps, "pp": pps, "z": z, "text": text, "hover": hover}


def checks_frame(report: Any) -> Any:
    """One row per check: rule, result (✓ / ✗ / unknown), the message naming the numbers."""
    import pandas as pd

    rows = [{"rule": c.rule, "result": MARK[c.ok], "message": c.message} for c in report.checks]
    m = report.memory
    if m is not None and m.gpu_mem is not None:
        rows.append(
            {
                "rule": "memory_per_gpu",
                "result": MARK[m.fits],
                "message": f"{human_bytes(m.total)} per GPU (stage {m.stage}) of "
                f"{human_bytes(m.gpu_mem)}; activations not counted",
            }
        )
    return pd.DataFrame(rows, columns=["rule", "result", "message"])


def arch_frame(report: Any) -> Any:
    """The architecture facts ``fit`` used, each with where it came from."""
    import pandas as pd

    a = report.arch
    rows = [{"fact": k, "value": str(getattr(a, k)), "from": src} for k, src in a.sources.items()]
    return pd.DataFrame(rows, columns=["fact", "value", "from"])


def _check_style(row: Any) -> list[str]:
    colour = {"✓": "#dcfce7", "✗": "#fee2e2", "unknown": "#f3f4f6"}.get(row.get("result"), "")
    return [f"background-color: {colour}" if colour else ""] * len(row)


class LayoutView(pn.viewable.Viewer):
    """The form, the verdict with its checks, the memory bars and the tp x pp grid."""

    def __init__(self, app: AppState, **params: Any) -> None:
        super().__init__(**params)
        self.app = app
        f = app.fit
        ints = {"tp": "tp", "pp": "pp", "ep": "ep", "gpus": "GPUs (0: tp × pp × ep)"}
        widgets: list[Any] = [
            pn.widgets.IntInput.from_param(
                f.param[k], name=label, width=160 if k == "gpus" else 100
            )
            for k, label in ints.items()
        ]
        widgets += [
            pn.widgets.Select.from_param(f.param.plugin, name="plugin", width=130),
            pn.widgets.Select.from_param(f.param.zero, name="ZeRO stage", width=130),
            pn.widgets.Select.from_param(f.param.dtype, name="dtype", width=90),
            pn.widgets.TextInput.from_param(
                f.param.gpu_mem, name="GPU memory", placeholder="80GB, 80GiB", width=130
            ),
        ]
        note = pn.pane.Markdown(
            "Rules of ColossalAI 0.5.0 (ShardFormer policies, plugins). Memory per GPU counts "
            "weights, gradients, fp32 master weights and Adam moments of the busiest pipeline "
            "stage; activations, buffers and fragmentation are not estimated.",
            styles={"color": "#6b7280"},
            sizing_mode="stretch_width",
        )
        self._status = pn.pane.Markdown("", sizing_mode="stretch_width")
        self._results = pn.Column(sizing_mode="stretch_width")
        self._stale = True
        form = section("Layout", pn.Row(*widgets, sizing_mode="stretch_width"), note, self._status)
        self._body = pn.Column(form, self._results, sizing_mode="stretch_width")
        f.param.watch(lambda *_: self.refresh(), list(FORM))
        watch(app.browse, lambda *_: self._view_changed(), "view")
        app.param.watch(lambda *_: self._maybe_refresh(), "active")
        watch(f, lambda *_: self._render(), ["report", "error", "running"])
        self._maybe_refresh()
        self._render()

    # ---- when to run ----------------------------------------------------------------------
    def _view_changed(self) -> None:
        self._stale = True
        self._maybe_refresh()

    def _maybe_refresh(self) -> None:
        if self._stale and self.app.active == "Layout":
            self.refresh()

    def refresh(self, wait: bool = False) -> None:
        """``fit`` of the open checkpoint at the form's layout (in the background)."""
        self._stale = False
        self.app.fit.run(self.app.browse.view, wait=wait, path=self.app.browse.path)

    # ---- drawing --------------------------------------------------------------------------
    def _render(self) -> None:
        f = self.app.fit
        if f.running:
            self._status.object = f"*{f.message}…*"
        else:
            self._status.object = f"Checks of {code(f.checkpoint)}." if f.checkpoint else ""
        memory_chart = self._memory(f.report, f.gpu_mem) if f.report is not None else None
        if f.error:
            self._results[:] = [error_pane(f.error)]
            return
        r = f.report
        if r is None:
            if not f.running:
                text = "Open a checkpoint to check it against a parallel layout."
                if self.app.browse.view is not None:
                    text = "Change a size in the form to check this checkpoint."
                self._results[:] = [placeholder(text)]
            return
        lay, m = r.layout, r.memory
        kpis = cards(
            [
                ("Verdict", VERDICT[r.fits], "all checks" if r.fits else "see the checks",
                 VERDICT_COLOUR[r.fits]),
                ("Layout", f"tp {lay.tp} × pp {lay.pp} × ep {lay.ep}",
                 f"dp {lay.dp}, {lay.world} GPUs"),
                ("Plugin", lay.plugin, f"ZeRO {lay.stage}, {lay.dtype}"),
                (
                    "Memory per GPU",
                    human_bytes(m.total) if m is not None else "—",
                    (f"of {gpu_words(f.gpu_mem, m.gpu_mem)}" if m.gpu_mem is not None else "no limit set")
                    if m is not None
                    else "no model tensors to count",
                    PALETTE[1],
                ),
            ]
        )  # fmt: skip
        checks = table(
            checks_frame(r),
            layout="fit_columns",
            widths={"rule": 170, "result": 90},
            formatters={"message": {"type": "textarea"}},  # long reasons wrap, never cut
        )
        checks.style.apply(  # type: ignore[union-attr]
            _check_style, axis=1
        )
        blocks: list[Any] = [
            kpis,
            section("Checks", checks),
            pn.Row(
                section("tp × pp: which sizes load (hover a cell for the reason)", self._grid(r)),
                section("Memory per GPU, by kind", memory_chart),
                sizing_mode="stretch_width",
            ),
            section(
                "Architecture facts (from config.json or the tensors)",
                table(arch_frame(r)) if r.arch.sources else placeholder("No fact was decidable."),
            ),
        ]
        self._results[:] = blocks

    @staticmethod
    def _grid(r: Any) -> pn.viewable.Viewable:
        import plotly.graph_objects as go

        g = grid_matrix(r.grid)
        x, y = [f"pp {p}" for p in g["pp"]], [f"tp {t}" for t in g["tp"]]
        fig = go.Figure(
            go.Heatmap(
                z=g["z"],
                x=x,
                y=y,
                text=g["text"],
                texttemplate="%{text}",
                textfont={"size": 15, "color": "#ffffff"},
                hovertext=g["hover"],
                hovertemplate="%{hovertext}<extra></extra>",
                colorscale=COLOURSCALE,
                zmin=0,
                zmax=1,
                showscale=False,
                xgap=3,
                ygap=3,
            )
        )
        if r.layout.tp in g["tp"] and r.layout.pp in g["pp"]:
            fig.add_shape(  # the layout asked in the form
                type="rect",
                xref="x",
                yref="y",
                x0=g["pp"].index(r.layout.pp) - 0.5,
                x1=g["pp"].index(r.layout.pp) + 0.5,
                y0=g["tp"].index(r.layout.tp) - 0.5,
                y1=g["tp"].index(r.layout.tp) + 0.5,
                line={"color": "#111827", "width": 3},
            )
        fig.update_yaxes(autorange="reversed", type="category")
        fig.update_xaxes(type="category", side="top")
        style_figure(fig, height=330)
        fig.update_layout(hoverlabel={"align": "left"})
        return plot(fig, name="fit-grid")

    @staticmethod
    def _memory(r: Any, typed: str = "") -> pn.viewable.Viewable:
        """Stacked bars of what one GPU holds, in a unit that shows them (MiB below 1 GiB);
        the GPU's memory as a bar only when it does not dwarf them, else said in words."""
        import plotly.graph_objects as go

        m = r.memory
        if m is None:
            return placeholder(
                "No model tensors in this checkpoint (or tp × pp does not divide the GPUs): "
                "nothing to count."
            )
        fig = go.Figure()
        label = f"stage {m.stage}"
        dwarfed = m.gpu_mem is not None and m.gpu_mem > 20 * max(m.total, 1)
        top = m.total if m.gpu_mem is None or dwarfed else max(m.total, m.gpu_mem)
        unit, div = ("MiB", 2**20) if top < 2**30 else ("GiB", 2**30)
        share = ""
        if dwarfed:
            share = f" — {share_words(m.total, m.gpu_mem)} of {gpu_words(typed, m.gpu_mem)}"
        title = f"total {fmt_bytes(m.total)} per GPU{share}"  # above the bars, never on them
        for i, (key, name) in enumerate(MEMORY_KINDS):
            b = int(getattr(m, key))
            fig.add_bar(
                y=[label],
                x=[b / div],
                name=name,
                orientation="h",
                marker_color=PALETTE[i],
                hovertemplate=f"{name}: {human_bytes(b)}<extra></extra>",
            )
        if m.gpu_mem is not None and not dwarfed:
            fig.add_bar(
                y=["GPU"],
                x=[m.gpu_mem / div],
                name="GPU memory",
                orientation="h",
                marker_color="#d1d5db",
                hovertemplate=f"GPU memory: {human_bytes(m.gpu_mem)}<extra></extra>",
            )
            fig.add_vline(x=m.gpu_mem / div, line={"color": BAD if m.fits is False else "#6b7280"})
        fig.update_xaxes(title=f"{unit} per GPU")
        style_figure(fig, height=330, title=title)
        fig.update_layout(barmode="stack", legend={"orientation": "h", "y": -0.3})
        return plot(fig, name="fit-memory")

    def __panel__(self) -> pn.viewable.Viewable:
        return self._body
