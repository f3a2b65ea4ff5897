"""Compare: A against B, streamed with a progress bar; per-layer plot and sortable table."""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import panel as pn

from ...diff.figure_layout import COLUMNS as FIGURE_COLUMNS
from ...natural import natural_key
from ..numbers import fmt_value, plural
from ..state import AppState
from ..tables import shape_text
from .ab_view import ABView
from .common import (
    BAD,
    GOOD,
    PALETTE,
    Drawn,
    cancel_button,
    cards,
    fmt_bytes,
    job_bar,
    keep_sort,
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
from .export import export_buttons, export_name
from .picker import PathPicker

if TYPE_CHECKING:
    from ...diff import TensorDiff

COLUMNS = [
    "name",
    "status",
    *(f.name for f in FIGURE_COLUMNS),  # the figure layout's table columns
    "dtype_a",
    "dtype_b",
    "shape_a",
    "shape_b",
    "param",
    "layer",
    "part",
    "state",
]
# 1 - cos instead of cos: one step apart cos is 1 - 1e-8, which 6 digits would show as 1;
# the counts headed as the CLI heads them
TITLES = {"one_minus_cos": "1−cos", "n_outside": "outside", "n_sign_flips": "flips"}
# where the page is narrow, these fold under their row first: the name says them already
FOLD_FIRST = ("state", "part", "layer", "n_sign_flips", "n_outside")
SAME = ("identical", "equal")
STATUS_COLOURS = {
    "changed": "#fef3c7",
    "shape_mismatch": "#fee2e2",
    "dtype_mismatch": "#fee2e2",
    "only_in_a": "#e0e7ff",
    "only_in_b": "#e0e7ff",
    "not_compared": "#f3f4f6",
}


PARTIAL_SHOWN = 100  # rows of a running diff shown
PARTIAL_EVERY = 1.0  # seconds between two redraws of them


def _rel_l2(row: Any) -> float:
    v = row.get("rel_l2") if isinstance(row, dict) else getattr(row, "rel_l2", None)
    return float(v) if isinstance(v, int | float) and v == v else -1.0


def natural_order(names: Any) -> list[int]:
    """Positions of ``names`` in natural order."""
    keys = [natural_key(str(n)) for n in names]
    return sorted(range(len(keys)), key=keys.__getitem__)


def alike_sides(rows: Any) -> list[str]:
    """``dtype`` / ``shape`` when B's equals A's in every row: the table shows one column,
    headed without ``_a`` (exports keep both)."""
    return [
        k
        for k in ("dtype", "shape")
        if f"{k}_a" in rows and f"{k}_b" in rows and rows[f"{k}_a"].equals(rows[f"{k}_b"])
    ]


def _row_style(row: Any) -> list[str]:
    colour = STATUS_COLOURS.get(row.get("status", ""), "")
    return [f"background-color: {colour}" if colour else ""] * len(row)


def diff_rows(rows: Sequence[TensorDiff], changed_only: bool) -> Any:
    """The table's frame: a DiffResult's rows (or partial rows), changed ones first."""
    import pandas as pd

    df = pd.DataFrame([r.to_dict() for r in rows])
    if not len(df):
        return pd.DataFrame(columns=COLUMNS)
    df = df[[c for c in COLUMNS if c in df.columns]].copy()
    for c in ("shape_a", "shape_b"):
        if c in df:
            df[c] = df[c].map(lambda s: shape_text(s) if isinstance(s, list | tuple) else "")
    if changed_only:
        df = df[~df["status"].isin(SAME)]
    df = df.iloc[natural_order(df["name"])]  # ties of rel_l2 stay in natural name order
    return df.sort_values(
        "rel_l2", ascending=False, na_position="last", ignore_index=True, kind="stable"
    )


# A Panel view's constructor (widgets, watches, body): alike in shape with the other views'.
class CompareView(pn.viewable.Viewer):
    """Choose A and B, run the diff in the background, read the result."""

    def __init__(self, app: AppState, **params: Any) -> None:
        super().__init__(**params)
        self.app = app
        c = self.app.compare
        self._a = PathPicker(self.app, "A (reference)", warn=self.app.unsafe_note)
        self._b = PathPicker(self.app, "B (compared)", warn=self.app.unsafe_note)
        sync(c, "a", self._a, "value")
        sync(c, "b", self._b, "value")
        self._atol = pn.widgets.FloatInput.from_param(c.param.atol, name="atol", width=110)
        self._rtol = pn.widgets.FloatInput.from_param(c.param.rtol, name="rtol", width=110)
        self._run = pn.widgets.Button(label="Compare", color="primary", width=120, align="end")
        on_press(self._run, c.run)
        self._cancel = cancel_button(c, align="end")
        self._progress = job_bar()
        self._status = pn.pane.Markdown("", sizing_mode="stretch_width")
        self._changed_only = pn.widgets.Switch(value=c.changed_only, width=40, align="center")
        sync(c, "changed_only", self._changed_only, "value")
        self._tbl: Any = None  # the result's table, and its rows
        self._rows: Any = None
        self._results = pn.Column(sizing_mode="stretch_width")
        self._drawn = Drawn()  # the result and switch the results show
        self._ab = ABView(c)
        self._partial_at = 0.0
        watch(c, self._on_progress, ["running", "progress", "message", "error"])
        watch(c, lambda *_: self._render(), ["result", "partial", "changed_only"])
        watch(c, lambda *_: self._show_selected(), "selected")
        form = pn.Row(
            pn.Column(self._a, self._b, sizing_mode="stretch_width"),
            pn.Column(pn.Row(self._atol, self._rtol), pn.Row(self._run, self._cancel)),
            sizing_mode="stretch_width",
        )
        # outside the re-rendered results: one A/B view for the page's whole life
        self._ab_section = section("A / B: the row's tensor in A and B", self._ab, visible=False)
        self._body = pn.Column(
            section("Checkpoints", form, pn.Column(self._progress, self._status)),
            self._results,
            self._ab_section,
            sizing_mode="stretch_width",
        )
        self._on_progress()
        self._render()

    def _on_progress(self, *_: Any) -> None:
        show_job(
            self.app.compare,
            self._progress,
            self._run,
            self._cancel,
            self._status,
            self._results,
            self._drawn,
        )

    def _render_partial(self, rows: list[Any]) -> None:
        """The rows so far, while the diff runs: the :data:`PARTIAL_SHOWN` largest changes,
        redrawn at most every :data:`PARTIAL_EVERY` seconds (a redraw of every row of a
        30k-tensor diff would keep the page too busy to take a click on Cancel)."""
        now = time.monotonic()
        if now - self._partial_at < PARTIAL_EVERY and len(self._results):
            return
        self._partial_at = now
        top = heapq.nlargest(PARTIAL_SHOWN, rows, key=_rel_l2)
        title = f"Partial results ({len(rows):,} tensors so far; the {len(top)} largest changes)"
        self._results[:] = [
            section(
                title,
                table(diff_rows(top, False), pagination="local", page_size=15, titles=TITLES),
            )
        ]

    def _render(self) -> None:
        c = self.app.compare
        r = c.result
        if r is None:
            self._drawn.forget()
            self._tbl = self._rows = None
            self._ab_section.visible = False
            if c.partial:
                self._render_partial(c.partial)
            elif not c.error:
                self._results[:] = [placeholder("Choose A and B, then Compare.")]
            return
        if not self._drawn.new(r, c.changed_only):
            return  # drawn already: the table a click may be on stays
        s = r.summary()
        self._ab_section.visible = True
        verdict = "EQUAL" if s["equal"] else "DIFFERENT"
        kpis = cards(
            [
                (
                    "Verdict",
                    verdict,
                    "cancelled: partial" if s["cancelled"] else "all compared",
                    GOOD if s["equal"] else BAD,
                ),
                ("Tensors", f"{s['tensors']:,}", f"{fmt_bytes(s['bytes_compared'])} read"),
                ("Identical", f"{s['identical']:,}", f"{s['equal_within_tolerance']} in tolerance"),
                ("Changed", f"{s['changed']:,}", "beyond tolerance"),
                ("Mismatch", f"{s['shape_mismatch'] + s['dtype_mismatch']}", "shape / dtype"),
                ("Only in A / B", f"{s['only_in_a']} / {s['only_in_b']}", "names"),
                ("Values changed", str(s["values_changed"]), "steps, lr, ..."),
            ]
        )
        rows = diff_rows(r.tensors, c.changed_only)
        same_sides = alike_sides(rows)
        tbl = table(
            rows,
            pagination="remote",
            page_size=15,
            css_classes=["diff-table"],
            titles={**TITLES, **{f"{k}_a": k for k in same_sides}},
            hidden_columns=[f"{k}_b" for k in same_sides],
            selectable=1,
            fit=True,  # every column within the page (a notebook's output too), text wrapped
            fold_first=FOLD_FIRST,
        )

        names_b = {t.name: t.name_b or "" for t in r.tensors}

        def open_row(i: int) -> None:
            """The tensor of row ``i`` of ``rows`` in A and B, unless shown (or being read)."""
            if not 0 <= i < len(rows):
                return
            row = rows.iloc[i]
            name = str(row["name"])
            if row["status"] in ("only_in_a", "only_in_b"):
                return
            if name != c.selected or c.ab_error:  # a failed read is tried again
                c.select(name, names_b.get(name, ""))

        keep_sort(self.app, "Compare", tbl)
        self._tbl, self._rows = tbl, rows
        self._show_selected()
        # a click reaches the server as a cell click whatever the table is doing in the
        # browser; as a selection only when Tabulator is not building or updating its rows
        tbl.on_click(lambda e: open_row(e.row))
        tbl.param.watch(lambda e: open_row(e.new[0]) if e.new else None, "selection")
        tbl.style.apply(  # type: ignore[union-attr]
            _row_style, axis=1
        )
        same = s["identical"] + s["equal_within_tolerance"]
        if s["tensors"] and same == s["tensors"]:  # nothing differs: say so, no empty chart
            words = (
                f"All {plural(s['tensors'], 'tensor')} are identical"
                if s["identical"] == s["tensors"]
                else f"All {plural(s['tensors'], 'tensor')} are equal within tolerance "
                f"({s['identical']:,} identical)"
            )
            blocks: list[Any] = [
                kpis,
                pn.pane.Alert(
                    f"**{words}** — nothing to plot.",
                    alert_type="success",
                    sizing_mode="stretch_width",
                    css_classes=["all-identical"],
                ),
            ]
            if not c.changed_only:
                blocks.append(section("Tensors", tbl))
        else:
            blocks = [
                kpis,
                section("Per layer: largest relative L2 and max |Δ|", self._layer_plot(r)),
                section(
                    "Tensors (click a row to see it in A and B)",
                    pn.Row(
                        pn.pane.Markdown("Changed only", align="center"),
                        self._changed_only,
                        export_buttons(tbl, export_name("compare", c.a, c.b)),
                    ),
                    tbl,
                ),
            ]
        if r.is_export:  # an export beside its source: its verdicts first, its own value rows
            from .export_compare import ExportCompare

            blocks.insert(1, ExportCompare(r))
        only = self._only(r)
        if only is not None:
            blocks.append(only)
        vals = r.values_dataframe()
        vals = vals[vals["status"] != "equal"]
        if len(vals) and not r.is_export:
            vals = vals.assign(a=vals["a"].map(fmt_value), b=vals["b"].map(fmt_value))
            values = table(vals, pagination="local", fit=True, css_classes=["values-table"])
            blocks.append(section("Values that differ", values))
        self._results[:] = blocks

    def _show_selected(self) -> None:
        """The row of the tensor shown A/B selected, on the page that holds it (a link's
        tensor, selected once the diff it re-ran ends)."""
        tbl, rows, name = self._tbl, self._rows, self.app.compare.selected
        if tbl is None or rows is None or not name:
            return
        hits = rows.index[rows["name"] == name]
        if not len(hits):
            return
        i = int(hits[0])
        if tbl.selection != [i]:
            view = tbl.current_view
            pos = list(view.index).index(i) if i in view.index else 0
            tbl.param.update(page=pos // (tbl.page_size or 15) + 1, selection=[i])

    @staticmethod
    def _only(r: Any) -> pn.viewable.Viewable | None:
        a = [t.name for t in r.tensors if t.status == "only_in_a"]
        b = [t.name for t in r.tensors if t.status == "only_in_b"]
        if not a and not b:
            return None
        import pandas as pd

        def lst(names: list[str], label: str) -> Any:
            return table(pd.DataFrame({label: names}), pagination="local", page_size=10)

        return section(
            "Names only on one side",
            pn.Row(lst(a, f"only in A ({len(a)})"), lst(b, f"only in B ({len(b)})")),
        )

    @staticmethod
    def _layer_plot(r: Any) -> pn.viewable.Viewable:
        from plotly.subplots import make_subplots

        agg = r.by_layer()
        if not agg:
            return placeholder("Nothing was compared.")
        fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
        series: dict[str, list[dict[str, Any]]] = {}
        for g in agg:
            key = "/".join(x for x in (g["part"], g["state"]) if x) or "model"
            series.setdefault(key, []).append(g)
        for i, (key, gs) in enumerate(series.items()):
            gs = sorted(gs, key=lambda g: (g["layer"] is None, natural_key(str(g["layer"]))))
            x = ["other" if g["layer"] is None else str(g["layer"]) for g in gs]
            colour = PALETTE[i % len(PALETTE)]
            common = {"x": x, "name": key, "legendgroup": key, "marker_color": colour}
            fig.add_bar(y=[g["max_rel_l2"] for g in gs], row=1, col=1, **common)
            fig.add_bar(y=[g["max_abs"] for g in gs], row=2, col=1, showlegend=False, **common)
        # magnitudes compared as bar heights: both axes start at zero
        fig.update_yaxes(title="rel. L2", rangemode="tozero", row=1, col=1)
        fig.update_yaxes(title="max |Δ|", rangemode="tozero", row=2, col=1)
        fig.update_xaxes(title="layer", type="category", row=2, col=1)
        style_figure(fig, height=440)
        fig.update_layout(barmode="group", legend={"orientation": "h", "y": 1.08})
        return plot(fig)

    def __panel__(self) -> pn.viewable.Viewable:
        return self._body
