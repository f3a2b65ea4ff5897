"""Optimizer: param groups, the parameter behind each state id, state statistics."""

from __future__ import annotations

from typing import Any

import panel as pn

from ..state import AppState
from ..subject import code
from ..tables import optimizer_of
from .common import cards, error_pane, keep_sort, on_press, placeholder, section, table, watch
from .export import export_buttons, export_name

VERTICAL_AFTER = 8  # param_groups with more columns than this: titles drawn upright


def _exportable(tbl: pn.widgets.Tabulator, name: str) -> list[Any]:
    return [export_buttons(tbl, name), tbl]


class OptimizerView(pn.viewable.Viewer):
    """The optimizer of the open checkpoint (itself or its ``optimizer`` part)."""

    def __init__(self, app: AppState, **params: Any) -> None:
        super().__init__(**params)
        self.app = app
        b = self.app.browse
        job = b.opt_stats_job
        self._stats_btn = pn.widgets.Button(
            label="Compute state statistics", color="primary", width=240
        )
        on_press(self._stats_btn, b.compute_optimizer_stats)
        self._progress = pn.indicators.Progress(
            value=0, max=100, bar_color="primary", width=260, visible=False, align="center"
        )
        self._progress_text = pn.pane.Markdown("", align="center")
        self._stats_area = pn.Column(sizing_mode="stretch_width")
        watch(job, self._on_job, ["running", "progress", "message", "error"])
        watch(b, lambda *_: self._render_stats(), "opt_stats")
        self._body = pn.Column(sizing_mode="stretch_width")
        watch(b, lambda *_: self._render(), "view")
        self._render()

    def _on_job(self, *_: Any) -> None:
        job = self.app.browse.opt_stats_job
        self._progress.visible = job.running
        self._progress.value = int(job.progress * 100)
        self._stats_btn.disabled = job.running
        self._progress_text.object = job.message
        if job.error:
            self._stats_area[:] = [error_pane(job.error)]

    def _render(self) -> None:
        b = self.app.browse
        if b.view is None:
            self._body[:] = [placeholder("Open a checkpoint to see its optimizer.")]
            return
        found = optimizer_of(b.view)
        if found is None:
            self._body[:] = [
                placeholder(
                    f"{b.path} holds no optimizer state ({b.view.family}). Open an optimizer "
                    "checkpoint or a training-state folder."
                )
            ]
            return
        info = found[1].optimizer
        assert info is not None
        groups = b.frame("groups")
        params = b.frame("opt_params")
        named = int(params["named"].isin(("recorded", "aligned", "known")).sum())
        kpis = cards(
            [
                ("Param groups", str(len(info.param_groups)), found[1].family),
                ("Params with state", f"{len(info.state_ids):,}", f"{named:,} named"),
                (
                    "State tensors",
                    ", ".join(sorted({s for v in info.state_names.values() for s in v}))[:40],
                    "per parameter",
                ),
                ("Names from", info.name_source or "unknown", "id → parameter"),
            ]
        )
        where = f"{code(b.path)}" + (f" (its part `{found[0].rstrip('/')}`)" if found[0] else "")
        self._body[:] = [
            pn.pane.Markdown(f"Optimizer of {where}.", sizing_mode="stretch_width"),
            kpis,
            section(
                "param_groups",
                *_exportable(
                    table(
                        groups,
                        fit=True,
                        css_classes=["param-groups"],
                        # a dozen settings: titles upright would be cut in a notebook's output
                        vertical_titles=len(groups.columns) > VERTICAL_AFTER,
                    ),
                    export_name("param_groups", b.path),
                ),
            ),
            section(
                "Parameters with optimizer state (click a row to open its state in the weight map)",
                self._params_table(params),
            ),
            section(
                "State statistics",
                pn.Row(self._stats_btn, self._progress, self._progress_text),
                self._stats_area,
            ),
        ]
        self._render_stats()

    def _params_table(self, params: Any) -> pn.widgets.Tabulator:
        t = table(
            params.drop(columns=["prefix"]),
            pagination="remote",
            page_size=15,
            header_filters={
                "name": {"type": "input", "func": "like", "placeholder": "name"},
                "states": {"type": "input", "func": "like", "placeholder": "state"},
            },
            selectable=1,
        )

        def on_select(event: Any) -> None:
            if event.new:
                prefix = params.iloc[event.new[0]]["prefix"]
                self.app.browse.param.update(name_filter=prefix, file_filter="")
                self.app.go("Weight map")

        t.param.watch(on_select, "selection")
        keep_sort(self.app, "Optimizer", t)
        return t

    def _render_stats(self) -> None:
        df = self.app.browse.opt_stats
        if df is None:
            self._stats_area[:] = [
                placeholder(
                    "Reads every state tensor once: mean and max |x| of exp_avg / exp_avg_sq, "
                    "and each parameter's step."
                )
            ]
            return
        name = export_name("optimizer_state_statistics", self.app.browse.path)
        self._stats_area[:] = _exportable(table(df, pagination="remote", page_size=15), name)

    def __panel__(self) -> pn.viewable.Viewable:
        return self._body
