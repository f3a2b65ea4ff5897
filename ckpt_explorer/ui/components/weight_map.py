"""Weight map: every tensor in a filterable table, the module tree and the shard sizes."""

from __future__ import annotations

from typing import Any

import panel as pn
from panel.io.model import JSCode

from ..numbers import fmt_int, plural
from ..state import AppState
from ..tables import short_labels
from .common import (
    JS_BREAKABLE,
    PALETTE,
    apply_sort,
    keep_sort,
    on_press,
    placeholder,
    section,
    table,
    watch,
)
from .export import export_buttons, export_name, name_exports
from .module_tree import ModuleTree
from .svg_chart import CHART_CSS, bars, hbars
from .tensor_detail import TensorDetailView

# names and files are filtered by the inputs above the table (state-driven: the module tree,
# findings and the optimizer view set them); the header filters cover the other columns only
HEADER_FILTERS = {
    "dtype": {"type": "input", "func": "like", "placeholder": "dtype"},
    "shape": {"type": "input", "func": "like", "placeholder": "shape"},
}
# long names and shard files wrap at their dots and slashes, never cut off
WRAP_CSS = """
.tabulator-cell[tabulator-field='name'], .tabulator-cell[tabulator-field='file'],
.tabulator-cell[tabulator-field='parameter'] {
  white-space: normal !important; overflow-wrap: break-word; text-overflow: clip;
}
.tabulator-cell[tabulator-field='file'] {font-size: 12px !important;}
.tabulator-cell[tabulator-field='shape'] {white-space: normal !important; text-overflow: clip;}
"""
# file names break at "/" and, where the column is narrower than a shard's name, before its
# suffix: each folder, the shard's stem and its suffix kept whole on their lines (a browser
# would also break after "-", as in model-00001)
JS_PATH_BREAKABLE = """function(cell) {
  const v = cell.getValue();
  if (v === null || v === undefined) return '';
  const map = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'};
  const parts = String(v).replace(/[&<>"']/g, (c) => map[c]).split('/');
  const whole = (t) => '<span style="white-space:nowrap">' + t + '</span>';
  return parts.map((p, i) => {
    if (i < parts.length - 1) return whole(p + '/');
    const dot = p.lastIndexOf('.');
    return dot > 0 ? whole(p.slice(0, dot)) + '<wbr>' + whole(p.slice(dot)) : whole(p);
  }).join('<wbr>');
}"""
BREAKABLE = {
    **dict.fromkeys(("name", "parameter"), JSCode(JS_BREAKABLE)),
    "file": JSCode(JS_PATH_BREAKABLE),
}
# the table's share of the row beside the detail panel, never narrower than its columns need
TABLE_BOX = {"flex": "1 1 760px", "min-width": "min(760px, 100%)"}
# columns that hold short values whole (in px): "float32", "4096 × 11008", "1.95 MiB"
MIN_WIDTHS = {"dtype": 84, "shape": 104, "bytes": 88}


def column_widths(folded: bool) -> dict[str, str]:
    """The table's column widths, 100 % in all: the parameter column's share goes to the
    names and files when no optimizer state names one (the column is hidden)."""
    if folded:
        return {
            "name": "26%",
            "parameter": "17%",
            "dtype": "9%",
            "shape": "13%",
            "bytes": "10%",
            "file": "23%",
        }
    return {"name": "36%", "dtype": "9%", "shape": "13%", "bytes": "10%", "file": "30%"}


# up to this many shards, upright bars in file order (their turned labels 22 px apart or more)
BARS_UPRIGHT = 16
TREE_TITLE = "Modules (click a module to filter, a tensor to see its values; ▸ opens)"


class WeightMap(pn.viewable.Viewer):
    """The tensor table (remote pagination: 100k rows stay on the server), the detail panel,
    the module tree (opened level by level; a click filters the table or opens a tensor) and
    a chart of shard sizes."""

    def __init__(self, app: AppState, **params: Any) -> None:
        super().__init__(**params)
        self.app = app
        b = self.app.browse
        self._name = pn.widgets.TextInput(
            label="Filter names", placeholder="e.g. layers.3.  or  exp_avg", width=300
        )
        self._file = pn.widgets.TextInput(label="Filter files", placeholder="shard file", width=220)
        self._name.param.watch(self._typed_name, "value_input")
        self._file.param.watch(self._typed_file, "value_input")
        watch(b, self._sync_inputs, ["name_filter", "file_filter"])
        self._clear = pn.widgets.Button(label="Clear filters", color="light", align="end")
        on_press(self._clear, self._clear_filters)
        self._count = pn.pane.Markdown("", align="end", margin=(0, 10, 12, 10))
        self._table = table(
            None,
            pagination="remote",
            page_size=18,
            header_filters=HEADER_FILTERS,
            selectable=1,
            layout="fit_columns",  # no fixed height: every row of the page shows, one scrollbar
            hidden_columns=["numel", "key"],
            widths=column_widths(folded=True),
            formatters=BREAKABLE,
            min_widths=MIN_WIDTHS,
            css_classes=["weight-map"],
        )
        self._table.stylesheets = [*self._table.stylesheets, WRAP_CSS]
        self._table.add_filter(
            pn.bind(
                self._rows,
                name=b.param.name_filter,
                file=b.param.file_filter,
                prefix=b.param.name_prefix,
            )
        )
        # a click reaches the server as a cell click whatever the table is doing in the
        # browser; as a selection only when Tabulator is not building or updating its rows
        self._table.on_click(lambda e: self._click_row(e.row))
        self._table.param.watch(lambda e: self._open_row(e.new[0]) if e.new else None, "selection")
        keep_sort(app, "Weight map", self._table)
        self._table.param.watch(lambda *_: self._update_count(), ["filters", "value", "page"])
        watch(b, lambda *_: self._filters_changed(), ["name_filter", "file_filter", "name_prefix"])
        self._export = export_buttons(self._table, "tensors")
        self._detail = TensorDetailView(browse=b)
        self._tree = ModuleTree(sizing_mode="stretch_width", css_classes=["modules"])
        self._tree.on_module = self._tree_module
        self._tree.on_tensor = self._tree_tensor
        self._shards = pn.Column(sizing_mode="stretch_width")
        self._charts = pn.Row(
            section(TREE_TITLE, self._tree, sizing_mode="stretch_width"),
            section("Shard sizes", self._shards, width=460, sizing_mode="fixed"),
            sizing_mode="stretch_width",
        )
        self._empty = placeholder("Open a checkpoint to see its tensors.")
        self._main = pn.Column(
            # wraps where the page is narrow (a notebook's output) instead of cutting off
            # what reaches past its right edge (the JSON button)
            pn.FlexBox(
                self._name,
                self._file,
                self._clear,
                self._count,
                self._export,
                flex_wrap="wrap",
                align_items="flex-end",
                sizing_mode="stretch_width",
            ),
            # the detail panel drops below the table where the page is too narrow for both
            # (a notebook's output): the table keeps room for every column whole
            pn.FlexBox(
                pn.Column(self._table, sizing_mode="stretch_width", styles=TABLE_BOX),
                section("Tensor detail", self._detail, width=420, height=620),
                flex_wrap="wrap",
                align_items="flex-start",
                sizing_mode="stretch_width",
            ),
            self._charts,
            sizing_mode="stretch_width",
        )
        self._body = pn.Column(sizing_mode="stretch_width")
        watch(b, lambda *_: self._load(), "view")
        self._load()

    def _clear_filters(self) -> None:
        self.app.browse.filter_text(name="", file="")

    def _typed_name(self, event: Any) -> None:
        if event.new != self.app.browse.name_filter:
            self.app.browse.filter_text(name=event.new)

    def _typed_file(self, event: Any) -> None:
        if event.new != self.app.browse.file_filter:
            self.app.browse.filter_text(file=event.new)

    def _filters_changed(self) -> None:
        """Back to page 1 (where the result starts), the count, and the module tree showing
        the module filtered (or none)."""
        self._table.page = 1
        self._update_count()
        b = self.app.browse
        self._tree.reveal(b.name_filter if b.name_prefix else "")

    def _rows(self, df: Any, name: str = "", file: str = "", prefix: bool = False) -> Any:
        """The table's rows for the filters (precomputed columns, recent queries kept)."""
        rows = self.app.browse.weight_filter()
        if rows is None or df is None:
            return df
        return rows(df, name, file, prefix)

    def _tree_module(self, prefix: str) -> None:
        with pn.io.hold():
            self.app.browse.filter_module(prefix)

    def _tree_tensor(self, name: str) -> None:
        with pn.io.hold():
            self.app.browse.focus(tensor=name)

    def _sync_inputs(self, *_: Any) -> None:
        b = self.app.browse
        if self._name.value_input != b.name_filter:
            self._name.param.update(value=b.name_filter, value_input=b.name_filter)
        if self._file.value_input != b.file_filter:
            self._file.param.update(value=b.file_filter, value_input=b.file_filter)

    def _load(self) -> None:
        b = self.app.browse
        if b.view is None:
            self._tree.set_index(None)
            self._body[:] = [self._empty]
            return
        weights = b.frame("weights")
        folded = bool(weights["parameter"].astype(bool).any())  # optimizer states named
        self._table.param.update(
            value=weights,
            selection=[],
            page=1,
            hidden_columns=["numel", "key"] + ([] if folded else ["parameter"]),
            widths=column_widths(folded),
        )
        apply_sort(self.app, "Weight map", self._table)
        name_exports(self._export, export_name("tensors", b.path))
        self._sync_inputs()
        self._update_count()
        self._tree.set_index(b.module_index())
        self._tree.reveal(b.name_filter if b.name_prefix else "")
        self._shards[:] = [self._shard_chart()]
        self._body[:] = [self._main]

    def _update_count(self) -> None:
        df = self._table.value
        if df is None:
            return
        shown = len(self._table.current_view)
        size = self._table.page_size or 18
        pages = max(1, -(-shown // size))
        page = min(self._table.page or 1, pages)
        first, last = (page - 1) * size + 1, min(page * size, shown)
        where = f" · rows {first:,}–{last:,}, page {page} of {pages}" if shown else ""
        self._count.object = f"**{fmt_int(shown)}** of {plural(len(df), 'tensor')}{where}"

    def _click_row(self, i: int) -> None:
        """A click on row ``i``: the row selected (highlighted; the selection opens it), or
        opened when it is selected already (a detail that failed is read again)."""
        if self._table.selection != [i]:
            self._table.selection = [i]
        else:
            self._open_row(i)

    def _open_row(self, i: int) -> None:
        """The detail of the table's row ``i``, unless it shows (or loads) already."""
        df, b = self._table.value, self.app.browse
        if df is None or not 0 <= i < len(df):
            return
        name = str(df.iloc[i]["name"])
        if name != b.selected or b.detail_error:
            b.select(name)

    def _shard_chart(self) -> pn.viewable.Viewable:
        files = self.app.browse.frame("files")
        data = files[files["tensors"] > 0]
        if not len(data):
            return placeholder("No data files.")
        names = list(data["file"])
        hovers = [
            f"{f}\n{size}, {n:,} tensors"
            for f, size, n in zip(names, data["size"], data["tensors"], strict=True)
        ]
        labels, sizes = short_labels(names), list(data["bytes"] / 2**20)
        if len(names) <= BARS_UPRIGHT:  # few shards: upright bars in the files' order
            chart = bars(labels, sizes, hovers, PALETTE[1], unit="MiB", height=380)
        else:  # many: one line each, largest first, scrolling (labels never overlap)
            chart = hbars(labels, sizes, hovers, PALETTE[1], unit="MiB")
        return pn.pane.HTML(chart, stylesheets=[CHART_CSS], name="shard-chart")

    def __panel__(self) -> pn.viewable.Viewable:
        return self._body
