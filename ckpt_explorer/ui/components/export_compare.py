"""Compare for an export beside its source (a GGUF against the HF folder it was made from).

The diff says whether the export is faithful (``summary()["export"]``); that is the banner.
Below it the tensors ranked by :meth:`~ckpt_explorer.diff.DiffResult.export_rows` (beyond
budget first, then within, then exact; each by its error / budget ratio) with the columns
that say why: verdict, storage type, ratio, budget, the export's tensor and a note. The
value rows of the export's metadata and of the source's config files are hidden by default
(the checks of one against the other stay); a checkbox shows them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import panel as pn

from .common import section, table

if TYPE_CHECKING:
    import pandas as pd

    from ...diff import DiffResult

EXPORT_COLUMNS = [
    "name",
    "verdict",
    "quant",
    "budget_ratio",
    "budget",
    "max_abs",
    "export_tensor",
    "note",
]
HIDDEN = ("__metadata__", "config.json.", "generation_config.json.")
VERDICT_COLOURS = {
    "beyond_budget": "#fde2e1",
    "cannot_tell": "#e5e7eb",
    "within_budget": "#fef3c7",
    "exact": "",
}
BANNER = {
    "faithful": ("FAITHFUL", "success"),
    "not_faithful": ("NOT FAITHFUL", "danger"),
    "cannot_tell": ("CANNOT TELL", "warning"),
}


def export_banner(summary: dict[str, Any]) -> pn.pane.Alert:
    """FAITHFUL / NOT FAITHFUL, with the count of each verdict and of unpaired tensors."""
    e = summary["export"]
    verdict = e.get("verdict") or ("faithful" if e["faithful"] else "not_faithful")
    title, alert = BANNER[verdict]
    words = (
        f"**{title}** — {e['exact']} exact, {e['within_budget']} within the budget of their "
        f"type, {e['beyond_budget']} beyond budget, {e['unpaired']} unpaired"
    )
    if e.get("cannot_tell"):
        words += (
            f"; {e['cannot_tell']} over a budget that does not bound their writer (weights "
            "moved before rounding): cannot tell"
        )
    return pn.pane.Alert(
        words,
        alert_type=alert,
        sizing_mode="stretch_width",
        css_classes=["export-verdict"],
    )


def hidden(name: str) -> bool:
    return name.startswith(HIDDEN)


def export_frame(result: DiffResult, show_hidden: bool = False) -> pd.DataFrame:
    """The export's tensors, ranked worst first (rows without a verdict after them)."""
    import pandas as pd

    ranked = result.export_rows()
    seen = {id(r) for r in ranked}
    rows = ranked + [r for r in result.tensors if id(r) not in seen]
    df = pd.DataFrame([r.to_dict() for r in rows], columns=list(result.to_frame().columns))
    df = df[[c for c in EXPORT_COLUMNS if c in df.columns]]
    if not show_hidden:
        df = df[~df["name"].map(hidden)]
    return df.reset_index(drop=True)


def export_values(result: DiffResult, show_hidden: bool = False) -> pd.DataFrame:
    """Value rows: the export's metadata checked against config.json; the raw metadata and
    config keys only with ``show_hidden``."""
    vals = result.values_dataframe()
    if not show_hidden:
        vals = vals[~vals["key"].map(hidden)]
    return vals.reset_index(drop=True)


def _style(row: Any) -> list[str]:
    colour = VERDICT_COLOURS.get(row.get("verdict") or "", "")
    return [f"background-color: {colour}" if colour else ""] * len(row)


class ExportCompare(pn.viewable.Viewer):
    """The banner, the ranked tensors and the metadata checks of one export diff."""

    def __init__(self, result: DiffResult, **params: Any) -> None:
        super().__init__(**params)
        self.result = result
        self.show_hidden = pn.widgets.Checkbox(label="Show metadata / config rows", value=False)
        self._body = pn.Column(sizing_mode="stretch_width")
        self.show_hidden.param.watch(lambda *_: self._render(), "value")
        self._render()

    def _render(self) -> None:
        show = self.show_hidden.value
        tensors = table(export_frame(self.result, show), pagination="remote", page_size=15)
        tensors.style.apply(_style, axis=1)  # type: ignore[union-attr]
        self.tensors = tensors
        self.values = table(export_values(self.result, show), pagination="local")
        self._body[:] = [
            section("Export tensors, worst first (error / budget of its type)", tensors),
            section("Export metadata against the source's config", self.values),
        ]

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            export_banner(self.result.summary()),
            self.show_hidden,
            self._body,
            sizing_mode="stretch_width",
        )
