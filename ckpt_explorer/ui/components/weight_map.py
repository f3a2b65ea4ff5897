"""Weight map: every tensor in a filterable table, a module tree and the shard sizes."""

from __future__ import annotations

from typing import Any

import panel as pn

from ..state import AppState
from ..tables import prefix_of
from .common import PALETTE, placeholder, plot, section, style_figure, table, watch
from .tensor_detail import TensorDetailView

# names and files are filtered by the inputs above the table (state-driven: the module tree,
# findings and the optimizer view set them); the header filters cover the other columns only
HEADER_FILTERS = {
    "dtype": {"type": "input", "func": "like", "placeholder": "dtype"},
    "shape": {"type": "input", "func": "like", "placeholder": "shape"},
}
# long names and shard files wrap inside their cells instead of being cut off
WRAP_CSS = """
.tabulator-cell[tabulator-field='name'], .tabulator-cell[tabulator-field='file'] {
  white-space: normal !important; overflow-wrap: anywhere; text-overflow: clip;
}
"""


def _contains(df: Any, name: str = "", file: str = "") -> Any:
    if df is None:
        return df
    if name:
        df = df[df["name"].str.contains(name, regex=False, case=False)]
    if file:
        df = df[df["file"].str.contains(file, regex=False, case=False)]
    return df


class WeightMap(pn.viewable.Viewer):
    """The tensor table (remote pagination: 100k rows stay on the server), the detail panel,
    a treemap of the module tree (click a box to filter) and a chart of shard sizes."""

    def __init__(self, app: AppState, **params: Any) -> None:
        super().__init__(**params)
        self.app = app
        b = self.app.browse
        self._name = pn.widgets.TextInput(
            name="Filter names", placeholder="e.g. layers.3.  or  exp_avg", width=300
        )
        self._file = pn.widgets.TextInput(name="Filter files", placeholder="shard file", width=220)
        self._name.param.watch(lambda e: setattr(b, "name_filter", e.new), "value_input")
        self._file.param.watch(lambda e: setattr(b, "file_filter", e.new), "value_input")
        watch(b, self._sync_inputs, ["name_filter", "file_filter"])
        self._clear = pn.widgets.Button(name="Clear filters", button_type="light", align="end")
        self._clear.on_click(lambda *_: self._clear_filters())
        self._count = pn.pane.Markdown("", align="end", margin=(0, 10, 12, 10))
        self._table = table(
            None,
            pagination="remote",
            page_size=18,
            header_filters=HEADER_FILTERS,
            selectable=1,
            height=560,
            layout="fit_columns",
            hidden_columns=["numel"],
            widths={"name": "38%", "dtype": 80, "shape": 100, "bytes": 90, "file": "28%"},
            formatters={"name": {"type": "textarea"}, "file": {"type": "textarea"}},
            css_classes=["weight-map"],
        )
        self._table.stylesheets = [*self._table.stylesheets, WRAP_CSS]
        self._table.add_filter(
            pn.bind(_contains, name=b.param.name_filter, file=b.param.file_filter)
        )
        self._table.param.watch(self._on_select, "selection")
        self._table.param.watch(lambda *_: self._update_count(), ["filters", "value"])
        watch(b, lambda *_: self._update_count(), ["name_filter", "file_filter"])
        self._detail = TensorDetailView(browse=b)
        self._charts = pn.Row(sizing_mode="stretch_width")
        self._empty = placeholder("Open a checkpoint to see its tensors.")
        self._main = pn.Column(
            pn.Row(self._name, self._file, self._clear, self._count, sizing_mode="stretch_width"),
            pn.Row(
                pn.Column(self._table, sizing_mode="stretch_width"),
                section("Tensor detail", self._detail, width=420, height=620),
                sizing_mode="stretch_width",
            ),
            self._charts,
            sizing_mode="stretch_width",
        )
        self._body = pn.Column(sizing_mode="stretch_width")
        watch(b, lambda *_: self._load(), "view")
        self._load()

    def _clear_filters(self) -> None:
        self.app.browse.param.update(name_filter="", file_filter="")

    def _sync_inputs(self, *_: Any) -> None:
        b = self.app.browse
        if self._name.value_input != b.name_filter:
            self._name.param.update(value=b.name_filter, value_input=b.name_filter)
        if self._file.value_input != b.file_filter:
            self._file.param.update(value=b.file_filter, value_input=b.file_filter)

    def _load(self) -> None:
        b = self.app.browse
        if b.view is None:
            self._body[:] = [self._empty]
            return
        self._table.param.update(value=b.frame("weights"), selection=[])
        self._sync_inputs()
        self._update_count()
        self._charts[:] = [
            section("Module tree (bytes; click a box to filter)", self._tree_chart()),
            section("Shard sizes", self._shard_chart()),
        ]
        self._body[:] = [self._main]

    def _update_count(self) -> None:
        df = self._table.value
        if df is None:
            return
        shown = len(self._table.current_view)
        self._count.object = f"**{shown:,}** of {len(df):,} tensors"

    def _on_select(self, event: Any) -> None:
        if not event.new:
            return
        df = self._table.value
        i = event.new[0]
        if df is not None and 0 <= i < len(df):
            self.app.browse.select(str(df.iloc[i]["name"]))

    def _tree_chart(self) -> pn.viewable.Viewable:
        import plotly.graph_objects as go

        tree = self.app.browse.frame("tree")
        if not len(tree):
            return placeholder("No tensors.")
        fig = go.Figure(
            go.Treemap(
                ids=tree["id"],
                parents=tree["parent"],
                labels=tree["label"],
                values=tree["bytes"],
                branchvalues="total",
                customdata=tree["tensors"],
                hovertemplate="%{id}<br>%{value:,} bytes, %{customdata} tensors<extra></extra>",
                maxdepth=3,
                marker={"colorscale": "Blues"},
            )
        )
        style_figure(fig, height=380)
        fig.update_layout(margin={"l": 4, "r": 4, "t": 4, "b": 4})
        pane = plot(fig)
        pane.param.watch(self._on_tree_click, "click_data")
        return pane

    def _on_tree_click(self, event: Any) -> None:
        points = (event.new or {}).get("points") or []
        if points and points[0].get("id"):
            self.app.browse.param.update(name_filter=prefix_of(points[0]["id"]), file_filter="")

    def _shard_chart(self) -> pn.viewable.Viewable:
        import plotly.graph_objects as go

        files = self.app.browse.frame("files")
        data = files[files["tensors"] > 0]
        if not len(data):
            return placeholder("No data files.")
        fig = go.Figure(
            go.Bar(
                x=data["file"],
                y=data["bytes"] / 2**20,
                customdata=data[["tensors", "size"]],
                marker_color=PALETTE[1],
                hovertemplate="%{x}<br>%{customdata[1]}, %{customdata[0]} tensors<extra></extra>",
            )
        )
        fig.update_yaxes(title="MiB")
        fig.update_xaxes(showticklabels=len(data) <= 40, tickangle=-30)
        return plot(style_figure(fig, height=380))

    def __panel__(self) -> pn.viewable.Viewable:
        return self._body
