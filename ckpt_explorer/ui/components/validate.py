"""Validate: the rules' findings on the open checkpoint, coloured by severity, linked."""

from __future__ import annotations

from typing import Any

import panel as pn

from ..state import AppState
from ..subject import acts_on, results_of
from .common import (
    BAD,
    GOOD,
    SEVERITY_COLOURS,
    cards,
    error_pane,
    keep_sort,
    on_press,
    placeholder,
    section,
    table,
    watch,
)
from .export import export_buttons, export_name

SEVERITY_ORDER = {"critical": 0, "error": 1, "warning": 2, "warn": 2, "info": 3, "ok": 4}
# a severity card's border: the colour of its severity (a warning is never green)
SEVERITY_ACCENTS = {
    "critical": "#b91c1c",
    "error": BAD,
    "warning": "#f59e0b",
    "warn": "#f59e0b",
    "info": "#0ea5e9",
    "ok": GOOD,
}
# findings fitted to the page: the fix (hint) beside its message, both wrapped
FINDING_WIDTHS = {
    "rule": "13%",
    "severity": "9%",
    "message": "25%",
    "hint": "23%",
    "tensor": "10%",
    "file": "10%",
    "param_id": "10%",
}


def _severity_style(row: Any) -> list[str]:
    colour = SEVERITY_COLOURS.get(str(row.get("severity", "")).lower(), "")
    return [f"background-color: {colour}" if colour else ""] * len(row)


def findings_frame(df: Any) -> Any:
    """Findings sorted worst first, with their simple columns first."""
    if df is None or not len(df) or "severity" not in df.columns:
        return df
    df = df.copy()
    for c in df.columns:
        if df[c].map(lambda v: isinstance(v, list | dict | tuple)).any():
            df[c] = df[c].map(
                lambda v: ", ".join(map(str, v)) if isinstance(v, list | tuple) else v
            )
            df[c] = df[c].map(lambda v: repr(v) if isinstance(v, dict) else v)
    key = df["severity"].map(lambda s: SEVERITY_ORDER.get(str(s).lower(), 9))
    df = df.assign(_k=key).sort_values("_k", kind="stable").drop(columns="_k")
    return df.reset_index(drop=True)


class ValidateView(pn.viewable.Viewer):
    """Runs validate_checkpoint on the open checkpoint; a row click opens its tensor or file."""

    def __init__(self, app: AppState, **params: Any) -> None:
        super().__init__(**params)
        self.app = app
        v = self.app.validate
        self._run = pn.widgets.Button(label="Validate", color="primary", width=120)
        on_press(self._run, self._start)
        self._target = pn.pane.Markdown("", align="center", sizing_mode="stretch_width")
        self._of = pn.pane.Markdown("", sizing_mode="stretch_width")
        self._progress = pn.indicators.Progress(
            active=True, bar_color="primary", width=240, visible=False, align="center"
        )
        self._results = pn.Column(sizing_mode="stretch_width")
        self._followed: tuple[Any, int] | None = None  # the finding last opened
        self._why = pn.pane.Alert(
            "", alert_type="info", visible=False, sizing_mode="stretch_width", css_classes=["why"]
        )
        watch(v, self._on_note, "note")
        watch(v, self._on_progress, ["running", "message", "error", "target", "checked"])
        watch(v, lambda *_: self._render(), "findings")
        watch(self.app.browse, lambda *_: self._on_progress(), "path")
        # the body every view lays out alike (a row of controls, then its results)
        self._body = pn.Column(
            pn.Row(self._run, self._progress, self._target, sizing_mode="stretch_width"),
            self._of,
            self._results,
            sizing_mode="stretch_width",
        )
        self._on_progress()
        self._render()

    def _start(self) -> None:
        v = self.app.validate
        v.target = v.target or self.app.browse.path
        v.run()

    def _on_progress(self, *_: Any) -> None:
        v = self.app.validate
        b = self.app.browse
        self._run.disabled = v.running or not (v.target or b.path)
        self._progress.visible = v.running
        line = acts_on("Validates", v.target or b.path, b.path)
        self._target.object = line + (f" *{v.message}*" if v.message else "")
        self._of.object = results_of("Findings", v.checked, b.path, "Validate")
        if v.error:
            self._results[:] = [error_pane(v.error)]

    def _render(self) -> None:
        v = self.app.validate
        df = findings_frame(v.findings)
        if df is None:
            if not v.error:
                self._results[:] = [
                    placeholder("Checks an open checkpoint before release; press Validate.")
                ]
            return
        counts = df["severity"].str.lower().value_counts() if "severity" in df else {}
        kpis = cards(
            [
                ("Findings", str(len(df)), v.checked),
                *(
                    (s.capitalize(), str(int(n)), "", SEVERITY_ACCENTS.get(s, "#6b7280"))
                    for s, n in dict(counts).items()
                ),
            ]
        )
        widths = {c: w for c, w in FINDING_WIDTHS.items() if c in df.columns}
        tbl = table(
            df,
            pagination="remote",
            page_size=20,
            selectable=1,
            css_classes=["findings"],
            fit=True,
            widths=widths,
            titles={"param_id": "param id"},  # wraps at its space, not "par / am / _id"
        )
        if "severity" in df:
            tbl.style.apply(  # type: ignore[union-attr]
                _severity_style, axis=1
            )
        # a click reaches the server as a cell click whatever the table is doing in the
        # browser; as a selection only when Tabulator is not building or updating its rows
        tbl.on_click(lambda e: self._click_row(tbl, df, e.row))
        tbl.param.watch(lambda e: self._follow(df, e.new), "selection")
        keep_sort(self.app, "Validate", tbl)
        note = pn.pane.Markdown(
            "Select a finding to open its tensor or file in the weight map.",
            styles={"color": "#6b7280"},
        )
        self._why.object = v.note
        self._why.visible = bool(v.note)
        self._results[:] = [
            kpis,
            section(
                "Findings (worst first)",
                pn.Row(note, export_buttons(tbl, export_name("findings", v.checked))),
                self._why,
                tbl,
            ),
        ]

    def _on_note(self, *_: Any) -> None:
        note = self.app.validate.note
        self._why.param.update(object=note or "", visible=bool(note))

    def _click_row(self, tbl: pn.widgets.Tabulator, df: Any, i: int) -> None:
        """A click on row ``i``: the row selected (highlighted; the selection follows it), or
        followed when it is selected already."""
        if tbl.selection != [i]:
            tbl.selection = [i]
        else:
            self._follow(df, [i])

    def _follow(self, df: Any, selection: list[int]) -> None:
        """Open the finding of row ``selection[0]``; once per click (a click comes as a cell
        click and a selection: the second, once the first has left this tab, is skipped)."""
        if not selection or not 0 <= selection[0] < len(df):
            return
        i, last = selection[0], self._followed
        if last is not None and last[0] is df and last[1] == i and self.app.active != "Validate":
            return
        self._followed = (df, i)
        row = {k: v for k, v in df.iloc[i].to_dict().items() if v == v}
        checked = self.app.validate.checked
        if checked and self.app.browse.path != checked:
            self.app.browse.open(checked)
        self.app.open_finding(row)

    def __panel__(self) -> pn.viewable.Viewable:
        return self._body
