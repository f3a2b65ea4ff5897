"""Resume doctor: the state training resumed from and one from after, causes ranked."""

from __future__ import annotations

import html
from typing import Any

import panel as pn

from ..numbers import fmt_value
from ..state import AppState
from ..subject import acts_on, code
from .common import error_pane, html_pane, on_press, placeholder, section, sync, table, watch
from .picker import PathPicker


def cause_html(rank: int, cause: dict[str, Any]) -> str:
    """One ranked cause (``Cause.to_dict()``) as a card: title, score, evidence, what to do."""
    title, score = cause["title"] or cause["cause"], float(cause["score"])
    evidence, hint = cause["evidence"], cause["hint"]
    score_txt = f"<span class='pill'>{score:.2f}</span>"
    items = "".join(f"<li>{html.escape(str(e))}</li>" for e in evidence)
    return (
        f"<div class='cause'><h4><span class='rank'>#{rank}</span>"
        f"{html.escape(str(title))}{score_txt}</h4>"
        + (f"<ul>{items}</ul>" if items else "")
        + (f"<div class='muted'>→ {html.escape(str(hint))}</div>" if hint else "")
        + "</div>"
    )


def facts_frame(facts: dict[str, Any], expected: dict[str, Any] | None = None) -> Any:
    """``{fact: (A, B)}`` as rows with what B should say after resuming from A (a counter:
    A's value plus the steps run since; anything else: A's value) and whether it does
    ("unknown" when that cannot be told)."""
    import pandas as pd

    from ...resume.report import as_expected

    expected = expected or {}
    rows = []
    for k, v in facts.items():
        a, b = (v[0], v[1]) if isinstance(v, list | tuple) and len(v) == 2 else (v, "")
        want = expected.get(k, a) if k in expected else a
        ok = as_expected(k, (a, b), expected)
        rows.append(
            {
                "fact": k,
                "A": "not recorded" if a is None else fmt_value(a),
                "B": "not recorded" if b is None else fmt_value(b),
                "B expected": "unknown" if want is None else fmt_value(want),
                "as expected": "unknown" if ok is None else "yes" if ok else "NO",
            }
        )
    return pd.DataFrame(rows, columns=["fact", "A", "B", "B expected", "as expected"])


def pair_words(a: str, b: str, open_path: str) -> str:
    """What Diagnose examines: A (the open checkpoint, or picked here) and B."""
    line = acts_on("Diagnoses the resume from", a, open_path)
    if not a:
        return line
    line = line.rstrip(".")
    return f"{line}; B is {code(b)}." if b else f"{line}; pick B, a state from after the resume."


# A Panel view's constructor (widgets, watches, body): alike in shape with the other views'.
class ResumeView(pn.viewable.Viewer):
    """Two training states in, the likely causes of a loss jump out, with their evidence."""

    def __init__(self, app: AppState, **params: Any) -> None:
        super().__init__(**params)
        self.app = app
        r = self.app.resume
        self._a = PathPicker(self.app, "Resumed from", warn=self.app.unsafe_note)
        self._b = PathPicker(
            self.app, "After resume (or a reference run)", warn=self.app.unsafe_note
        )
        sync(r, "a", self._a, "value")
        sync(r, "b", self._b, "value")
        self._run = pn.widgets.Button(label="Diagnose", color="primary", width=120)
        on_press(self._run, r.run)
        self._progress = pn.indicators.Progress(
            active=True, bar_color="primary", width=240, visible=False, align="center"
        )
        self._status = pn.pane.Markdown("", align="center")
        self._subject = pn.pane.Markdown("", sizing_mode="stretch_width")
        self._results = pn.Column(sizing_mode="stretch_width")
        watch(r, self._on_progress, ["running", "message", "error", "a", "b"])
        watch(self.app.browse, self._on_progress, "path")
        watch(r, lambda *_: self._render(), "causes")
        self._body = pn.Column(
            section(
                "Training states",
                pn.Row(self._a, self._b, sizing_mode="stretch_width"),
                self._subject,
                pn.Row(self._run, self._progress, self._status),
            ),
            self._results,
            sizing_mode="stretch_width",
        )
        self._on_progress()
        self._render()

    def _on_progress(self, *_: Any) -> None:
        r = self.app.resume
        self._run.disabled = r.running
        self._progress.visible = r.running
        self._status.object = f"*{r.message}*" if r.message else ""
        self._subject.object = pair_words(r.a, r.b, self.app.browse.path)
        if r.error:
            self._results[:] = [error_pane(r.error)]

    def _render(self) -> None:
        r = self.app.resume
        if not r.causes:
            if r.report_obj is not None:
                self._results[:] = [
                    pn.pane.Alert("No likely cause found: the states agree.", alert_type="success")
                ]
            elif not r.error:
                self._results[:] = [
                    placeholder("Pick the checkpoint you resumed from and one from after.")
                ]
            return
        body = "".join(cause_html(i + 1, c) for i, c in enumerate(r.causes))
        a, b = r.examined
        blocks: list[Any] = [
            pn.pane.Markdown(f"Causes for {code(a)} → {code(b)}.", sizing_mode="stretch_width"),
            section("Likely causes, most likely first", html_pane(body)),
        ]
        facts = r.report_obj.facts if r.report_obj is not None else None
        if facts:
            expected = r.report_obj.expected if r.report_obj is not None else {}
            blocks.append(section("What each state says", table(facts_frame(facts, expected))))
        self._results[:] = blocks

    def __panel__(self) -> pn.viewable.Viewable:
        return self._body
