"""Look and feel shared by the views: cards, notes, tables and chart styling."""

from __future__ import annotations

import contextlib
import html
import re
import threading
from collections.abc import Callable
from typing import Any

import panel as pn
from panel.io.model import JSCode

from ..numbers import JS_NUMBER, display_frame, number_columns
from ..numbers import fmt_bytes as fmt_bytes  # re-exported: the views format through these
from ..numbers import fmt_count as fmt_count
from ..owner_thread import after_message, mailbox
from ..warm_up import hold, working
from .sorted_table import Table, text_columns

ACCENT = "#4f46e5"
GOOD, BAD = "#10b981", "#ef4444"
PALETTE = ["#4f46e5", "#0ea5e9", "#10b981", "#f59e0b", "#ef4444", "#8b5cf6", "#14b8a6", "#f97316"]
SEVERITY_COLOURS = {
    "error": "#fee2e2",
    "critical": "#fecaca",
    "warning": "#fef3c7",
    "warn": "#fef3c7",
    "info": "#e0f2fe",
    "ok": "#dcfce7",
}

CARD_CSS = """
.cards {display: flex; flex-wrap: wrap; gap: 12px; margin: 4px 0 8px 0;}
.card {background: #fff; border: 1px solid #e5e7eb; border-radius: 10px; padding: 10px 16px;
       min-width: 130px; box-shadow: 0 1px 2px rgba(0,0,0,.04);}
.card .label {font-size: 11px; text-transform: uppercase; letter-spacing: .06em; color: #6b7280;}
.card .value {font-size: 22px; font-weight: 600; color: #111827; margin-top: 2px;
              white-space: nowrap;}
.card .value.long {font-size: 15px; padding-top: 6px;}
.card .sub {font-size: 12px; color: #6b7280;}
.cards.compact {display: grid; grid-template-columns: 1fr 1fr; gap: 8px;}
.cards.compact .card {min-width: 0; padding: 6px 10px;}
.cards.compact .card .value {font-size: 16px; white-space: normal; overflow-wrap: anywhere;}
.cards .card .value.long {white-space: normal; overflow-wrap: anywhere;}
.card.accent {border-left: 4px solid var(--card-accent, #4f46e5);}
.evidence {margin: 0; padding-left: 0; list-style: none;}
.evidence li {padding: 3px 0; color: #374151;}
.evidence li::before {content: "✓ "; color: #10b981; font-weight: 700;}
.verdicts {margin: 0; padding-left: 0; list-style: none;}
.verdicts li {padding: 3px 0; color: #374151;}
.muted {color: #6b7280;}
.cause {border: 1px solid #e5e7eb; border-radius: 10px; padding: 12px 16px; margin: 8px 0;
        background: #fff;}
.cause h4 {margin: 0 0 4px 0;} .cause .rank {color: #4f46e5; font-weight: 700; margin-right: 6px;}
.pill {display: inline-block; border-radius: 999px; padding: 1px 10px; font-size: 12px;
       background: #eef2ff; color: #3730a3; margin-left: 6px;}
"""


def cards(items: list[tuple[Any, ...]], compact: bool = False) -> pn.pane.HTML:
    """A row of KPI cards from ``(label, value, subtitle[, accent colour])``."""
    body = "".join(
        f'<div class="card accent" style="--card-accent:'
        f'{item[3] if len(item) > 3 else PALETTE[i % len(PALETTE)]}">'
        f'<div class="label">{html.escape(str(item[0]))}</div>'
        f'<div class="value{" long" if len(str(item[1])) > 16 else ""}">'
        f"{html.escape(str(item[1]))}</div>"
        f'<div class="sub">{html.escape(str(item[2]))}</div></div>'
        for i, item in enumerate(items)
    )
    cls = "cards compact" if compact else "cards"
    return pn.pane.HTML(
        f'<div class="{cls}">{body}</div>', stylesheets=[CARD_CSS], sizing_mode="stretch_width"
    )


def html_pane(body: str, **kw: Any) -> pn.pane.HTML:
    return pn.pane.HTML(body, stylesheets=[CARD_CSS], **kw)


def placeholder(text: str) -> pn.pane.Markdown:
    return pn.pane.Markdown(f"<span class='muted'>{html.escape(text)}</span>", margin=(10, 10))


def error_pane(message: str) -> pn.pane.Alert:
    """A red box; long words (paths, bytes) wrap inside it instead of spilling out."""
    return pn.pane.Alert(
        message,
        alert_type="danger",
        sizing_mode="stretch_width",
        styles={"overflow-wrap": "anywhere", "word-break": "break-word"},
    )


def fit_list(names: Any, limit: int = 40) -> str:
    """``a, b, c`` cut at a whole name, with ``+N more`` (never ``runni``)."""
    names = [str(n) for n in names]
    out: list[str] = []
    for n in names:
        if out and len(", ".join([*out, n])) > limit:
            return ", ".join(out) + f" +{len(names) - len(out)} more"
        out.append(n)
    return ", ".join(out)


def job_status(job: Any) -> str:
    """A background job's status line (markdown): its message, and once it has finished, how
    long it took; escaped, since messages carry file names."""
    done = f" in {job.seconds:.1f} s" if not job.running and job.seconds else ""
    text = job.message + done
    return f"*{html.escape(text)}*" if text else ""


def job_bar(color: str = "primary") -> pn.indicators.Progress:
    """A background job's progress bar (in thousandths), hidden until the job runs."""
    return pn.indicators.Progress(
        value=0, max=1000, bar_color=color, sizing_mode="stretch_width", visible=False
    )


def on_press(button: pn.widgets.Button, fn: Callable[[], Any]) -> None:
    """``fn()`` when ``button`` is pressed, with the form's values as the page showed them
    (in a notebook a value typed just before the click arrives after it otherwise:
    :func:`..owner_thread.after_message`)."""
    button.on_click(lambda *_: after_message(fn))


def cancel_button(job: Any, **kw: Any) -> pn.widgets.Button:
    """Cancel for a background job, disabled until it runs."""
    button = pn.widgets.Button(label="Cancel", width=90, disabled=True, **kw)
    button.on_click(lambda *_: job.cancel())
    return button


def show_job(
    job: Any,
    bar: Any,
    start: Any,
    cancel: Any,
    status: Any,
    results: Any,
    drawn: Drawn | None = None,
) -> None:
    """A job's widgets brought up to date: its bar, Start/Cancel enabled by whether it runs,
    its status line, and its error (if any) in place of the ``results`` (and ``drawn``
    forgotten)."""
    bar.visible = job.running
    bar.value = int(job.progress * 1000)
    start.disabled = job.running
    cancel.disabled = not job.running
    status.object = job_status(job)
    if job.error:
        results[:] = [error_pane(job.error)]
        if drawn is not None:
            drawn.forget()


BYTES_FORMAT = {"type": "money", "precision": 0, "thousand": ",", "symbol": ""}
TABLE_CSS = """
.tabulator {font-size: 13px; border-radius: 8px;}
.tabulator .tabulator-header .tabulator-col .tabulator-col-title {font-size: 12px;}
.tabulator-row .tabulator-cell {padding: 5px 8px; font-size: 13px;}
.tabulator-row.tabulator-selected .tabulator-cell {color: #111827 !important;
  background-color: #c7d2fe !important;}
.tabulator-cell.wrap {white-space: normal !important; overflow-wrap: anywhere;
  text-overflow: clip !important;}
"""
# a table fitted to the page: every column within it, titles and text wrapped at spaces and at
# the <wbr> the formatters put after "." "/" "_" (never inside a word or a number); a column
# that does not fit at its least width folds into a list under its row (Tabulator's
# responsive collapse), never past the edge
FIT_CSS = """
.tabulator .tabulator-header .tabulator-col .tabulator-col-title {white-space: normal !important;
  overflow-wrap: normal; word-break: normal; text-overflow: clip;}
.tabulator-row .tabulator-cell, .tabulator-row .tabulator-cell.wrap {white-space: normal !important;
  overflow-wrap: normal !important; word-break: normal; text-overflow: clip !important;}
.tabulator-row .tabulator-responsive-collapse {padding: 0 8px 4px 8px; border-bottom: 0;
  background-color: #fff !important; color: #374151;}
.tabulator-responsive-collapse .folded {display: flex; flex-wrap: wrap; gap: 0 16px;
  font-size: 12px; color: #374151;}
.tabulator-responsive-collapse .folded b {font-weight: 500; color: #6b7280;}
.tabulator-responsive-collapse .folded > span {overflow-wrap: anywhere;}
"""
COUNT_COLUMNS = ("numel", "tensors")  # whole counts with thousands separators
# byte counts: every one in binary units, as fmt_bytes writes them (3 significant digits),
# so one view never shows raw bytes in one column and KiB in the next; the cell keeps the
# number (sorting and exports use it)
BYTE_COLUMNS = ("bytes", "tensor_bytes", "nbytes", "bytes_a", "bytes_b", "size_bytes")
JS_BYTES = """function(cell) {
  const v = cell.getValue();
  if (v === null || v === undefined || v === '') return '';
  let x = Number(v);
  if (!isFinite(x)) return String(v);
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  while (Math.abs(x) >= 1024 && i < units.length - 1) { x /= 1024; i += 1; }
  return i === 0 ? Math.trunc(x) + ' B' : Number(x.toPrecision(3)) + ' ' + units[i];
}"""
# text columns that hold names and paths: never cut, they wrap at "." and "/" instead
NAME_COLUMNS = (
    "name",
    "parameter",
    "file",
    "path",
    "tensor",
    "checkpoint",
    "key",
    "first tensors",
    "name_b",
    "source",
)
NAME_WIDTH = 460  # px a name column starts at most (wider names wrap)
# names break after "." and "/" only (a <wbr>, no character: copied names stay exact); never
# at "_" or "-", which would split a word such as in_proj or model-00001
JS_BREAKABLE = """function(cell) {
  const v = cell.getValue();
  if (v === null || v === undefined) return '';
  const map = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'};
  return String(v).replace(/[&<>"']/g, (c) => map[c]).replace(/([./])/g, '$1<wbr>');
}"""


# the columns folded under a row: "title value" pairs on one wrapped line (not a list of rows)
JS_FOLDED = """function(data) {
  const el = document.createElement('div');
  el.className = 'folded';
  for (const item of data) {
    if (item.value === '' || item.value === null || item.value === undefined) continue;
    const pair = document.createElement('span');
    const title = document.createElement('b');
    title.textContent = item.title + ' ';
    const value = document.createElement('span');
    if (item.value instanceof Node) value.textContent = item.value.textContent;
    else value.innerHTML = item.value;
    pair.append(title, value);
    el.appendChild(pair);
  }
  return el.childNodes.length ? el : '';
}"""
# text columns other than names (rule ids, messages, settings): a long word breaks after "/",
# "_" or a "." before a letter (``integrity.<wbr>total_<wbr>size_<wbr>convention``), never in a
# number such as 0.5068359375
JS_WORDS = """function(cell) {
  const v = cell.getValue();
  if (v === null || v === undefined) return '';
  const map = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'};
  return String(v).replace(/[&<>"']/g, (c) => map[c])
    .replace(/([\\/_]|\\.(?=[A-Za-z_]))/g, '$1<wbr>');
}"""
# where each formatter lets a word break (after the character matched), as Python splits it
NAME_BREAKS = re.compile(r"(?<=[./])")
WORD_BREAKS = re.compile(r"(?<=[/_])|(?<=\.)(?=[A-Za-z_])")
CHAR_PX = 8  # a 13 px character of the table's font (digits are the widest: 8.3 px)
CELL_PX = 18  # a cell's padding and border
TITLE_PX = 36  # a title's padding and its sort arrow
WIDEST_LEAST = 240  # px: no column asks for more than this to hold its longest word
SCANNED = 2000  # rows a column's least width is measured on (the longest texts first)


def title_widths(df: Any, titles: dict[str, str]) -> dict[str, int]:
    """The least width (px) of each column of ``df`` for its title's longest word to fit
    whole beside the sort arrow (``min_widths`` of :func:`table`): a fitted table of a few
    columns then never breaks ``param_id`` into letters."""
    if df is None:
        return {}
    out = {}
    for c in df.columns:
        words = str(titles.get(c, c)).split()
        out[str(c)] = 8 * max((len(w) for w in words), default=1) + TITLE_PX
    return out


def _longest_word(texts: Any, breaks: re.Pattern[str]) -> int:
    """Characters of the longest piece of ``texts`` no line may break (between spaces and
    the breaks the column's formatter allows)."""
    return max((len(p) for t in texts for w in str(t).split() for p in breaks.split(w)), default=0)


def shown_widths(df: Any, names: list[str], words: list[str], numeric: list[str]) -> dict[str, int]:
    """The least width (px) of each column of ``df`` that holds its values as drawn without
    cutting a word: names and text by their longest unbreakable piece, numbers, counts and
    byte sizes whole (measured on :data:`SCANNED` rows; at most :data:`WIDEST_LEAST`)."""
    from ..numbers import fmt_number

    out = {}
    for c in df.columns:
        s = df[c].dropna()
        if not len(s):
            continue
        if c in BYTE_COLUMNS:
            chars = 8  # "1023 KiB", "1.95 MiB", kept on one line
        elif c in COUNT_COLUMNS:
            chars = len(f"{int(s.abs().max()):,}")
        elif c in numeric:
            chars = max(len(fmt_number(x)) for x in s.head(SCANNED))
        elif c in names or c in words:
            longest = s.astype(str)
            if len(longest) > SCANNED:
                longest = longest[longest.str.len().nlargest(SCANNED).index]
            chars = _longest_word(longest, NAME_BREAKS if c in names else WORD_BREAKS)
        else:  # whole numbers, booleans
            chars = max(len(str(x)) for x in s.head(SCANNED))
        out[str(c)] = min(CHAR_PX * chars + CELL_PX, WIDEST_LEAST)
    return out


def empty_columns(df: Any) -> list[str]:
    """Columns of ``df`` with no value in any row ("" or missing): a fitted table hides them,
    giving their width to the others (exports keep them)."""
    if df is None or not len(df):
        return []
    return [
        str(c) for c in df.columns if (df[c].isna() | df[c].astype(str).str.strip().eq("")).all()
    ]


def table(df: Any, **kw: Any) -> Table:
    """A read-only table with the dashboard's defaults: numbers by the one display rule
    (:func:`~ckpt_explorer.ui.numbers.display_frame`), text sorted in natural order, names
    and paths wrapped instead of cut (with the whole value as a tooltip); ``fit=True``: every
    column within the page's width, each at least as wide as its longest word and number
    (:func:`shown_widths`), titles and text wrapped only where a word may break, columns
    empty in every row hidden, and a column that still does not fit folded into a list under
    its row, the columns named in ``fold_first`` first, then from the right (the first column
    never); ``min_widths``: the least width in px of some columns; ``vertical_titles``: titles
    turned upright (many columns)."""
    numeric: list[str] = []
    texts: list[str] = []
    given = df
    if df is not None:
        df = display_frame(df)
        numeric = number_columns(df)
        texts = text_columns(df)
    fit = kw.pop("fit", False)
    least = dict(kw.pop("min_widths", {}))  # px per column
    vertical = kw.pop("vertical_titles", False)
    fold_first = list(kw.pop("fold_first", ()))
    wrap = kw.pop("wrap", ())
    names = [c for c in texts if c in NAME_COLUMNS or c in wrap]
    words = [c for c in texts if c not in names] if fit else []
    columns = [
        {
            "field": c,
            **({"sorter": "alphanum"} if kw.get("pagination") != "remote" else {}),
            **({"cssClass": "wrap", "maxInitialWidth": NAME_WIDTH} if c in names else {}),
        }
        for c in texts
    ]
    defaults: dict[str, Any] = {
        "show_index": False,
        "disabled": True,
        "theme": "modern",
        "layout": "fit_data_stretch",
        "sizing_mode": "stretch_width",
        "configuration": {
            "columnDefaults": {"headerTooltip": True, "tooltip": True},
            "columns": columns,
        },
        "stylesheets": [TABLE_CSS, FIT_CSS] if fit else [TABLE_CSS],
    }
    if fit and df is not None:  # every column within the page's width, text wrapped in it
        defaults["layout"] = "fit_columns"
        shown = shown_widths(df, names, words, numeric)
        heads = {} if vertical else title_widths(df, kw.get("titles", {}))
        least = {c: max(shown.get(c, 0), heads.get(c, 0)) for c in map(str, df.columns)} | least
        hide = [c for c in empty_columns(df) if c not in kw.get("hidden_columns", ())]
        kw["hidden_columns"] = [*kw.get("hidden_columns", ()), *hide]
        first = str(df.columns[0]) if len(df.columns) else ""
        order = [c for c in fold_first if c in least] + [c for c in reversed(list(least))]
        fold = {c: len(order) - order.index(c) for c in dict.fromkeys(order)}  # largest first
        known = {col["field"]: col for col in columns}
        for c in map(str, df.columns):
            col = known.get(c) or {"field": c}
            if c not in known:
                columns.append(col)
            col.pop("maxInitialWidth", None)
            col["responsive"] = 0 if c == first else fold.get(c, 1)
            if c in names or c in words:
                col["widthGrow"] = 2  # free width goes to text before numbers
        defaults["configuration"].update(
            responsiveLayout="collapse",
            responsiveLayoutCollapseStartOpen=True,
            responsiveLayoutCollapseFormatter=JSCode(JS_FOLDED),
        )
        defaults["configuration"]["columnDefaults"]["headerWordWrap"] = True
    known = {col["field"]: col for col in columns}
    for c, w in least.items():
        if c not in known:
            known[c] = {"field": c}
            columns.append(known[c])
        known[c]["minWidth"] = w
    if vertical:  # many narrow columns: each title turned, read whole
        defaults["configuration"]["columnDefaults"]["headerVertical"] = "flip"
    defaults["formatters"] = {
        **dict.fromkeys(numeric, JSCode(JS_NUMBER)),
        **dict.fromkeys(names, JSCode(JS_BREAKABLE)),
        **dict.fromkeys(words, JSCode(JS_WORDS)),
        **dict.fromkeys(COUNT_COLUMNS, BYTES_FORMAT),
        **dict.fromkeys(BYTE_COLUMNS, JSCode(JS_BYTES)),
        **kw.pop("formatters", {}),
    }
    defaults.update(kw)
    tbl = Table(df, **defaults)
    tbl.typed_source, tbl.typed_for = given, df  # what an export writes for the rows shown
    return tbl


def style_figure(fig: Any, height: int = 320, title: str | None = None) -> Any:
    """The dashboard's plotly styling (white, compact, readable fonts)."""
    fig.update_layout(
        template="plotly_white",
        height=height,
        margin={"l": 40, "r": 16, "t": 44 if title else 16, "b": 36},
        font={"family": "Inter, Segoe UI, Helvetica, Arial, sans-serif", "size": 12},
        colorway=PALETTE,
        title={"text": title, "x": 0.01, "font": {"size": 14}} if title else None,
        legend={"orientation": "h", "y": -0.2},
        modebar={"orientation": "v"},  # at the side: never over a title or axis labels
    )
    # powers of ten as 1e-10, never SI prefixes ("100p" reads as picometres)
    fig.update_xaxes(exponentformat="e")
    fig.update_yaxes(exponentformat="e")
    return fig


# the figures the views draw first, each built once in the background (:func:`warm_figure`)
FIGURE_KINDS = ("bar", "heatmap", "scatter", "subplots", "widget check")


def warm_figure(kind: str) -> None:
    """Build one styled figure of ``kind`` (:data:`FIGURE_KINDS`): plotly loads a trace
    type's checks and the template when first used, better in the background than at a
    click. ``widget check``: Panel's Plotly pane checks each figure against
    ``go.FigureWidget`` (plotly imports ipywidgets then)."""
    import plotly.graph_objects as go

    if kind == "subplots":
        from plotly.subplots import make_subplots

        fig = make_subplots(rows=2, cols=1).add_bar(y=[0], row=1, col=1)
    elif kind == "widget check":
        with contextlib.suppress(Exception):  # no ipywidgets: nothing to load
            go.FigureWidget  # noqa: B018
        return
    else:
        traces = {
            "bar": lambda: go.Bar(y=[0]),
            "heatmap": lambda: go.Heatmap(z=[[0.0]]),
            "scatter": lambda: go.Scatter(y=[0]),
        }
        fig = go.Figure(traces[kind]())
    plot(style_figure(fig, title="warm"))


def skip_notebook_renderers() -> None:
    """For a served page: plotly's notebook renderers are never asked for nbformat.

    Panel's Plotly pane checks every figure against ``go.FigureWidget``; plotly imports that
    class lazily, with ``plotly.io._renderers``, which imports nbformat, jsonschema and
    rfc3987-syntax (a grammar built at import): about 1.7 CPU seconds of the first chart of
    a fresh server (the first Compare's). A served page draws figures through Panel, never
    through plotly's renderers, so plotly is told nbformat is absent (in a notebook, where
    ``fig.show()`` uses it, nothing changes)."""
    import sys

    if "nbformat" in sys.modules:
        return
    from _plotly_utils import optional_imports

    optional_imports._not_importable.add("nbformat")


def plot(fig: Any, **kw: Any) -> pn.pane.Plotly:
    return pn.pane.Plotly(
        fig,
        config={"displaylogo": False, "responsive": True},
        sizing_mode="stretch_width",
        **kw,
    )


def section(title: str, *objects: Any, **kw: Any) -> pn.Card:
    """A titled, bordered block."""
    if "width" in kw:
        kw.setdefault("sizing_mode", "fixed" if "height" in kw else "stretch_height")
    kw.setdefault("sizing_mode", "stretch_width")
    return pn.Card(
        *objects,
        title=title,
        collapsible=False,
        styles={"background": "#ffffff"},
        header_background="#f8fafc",
        margin=(6, 6),
        **kw,
    )


def sync(a: Any, a_name: str, b: Any, b_name: str) -> None:
    """Keep ``a.<a_name>`` and ``b.<b_name>`` equal (b takes a's value first)."""
    setattr(b, b_name, getattr(a, a_name))

    def to_b(e: Any) -> None:
        if getattr(b, b_name) != e.new:
            setattr(b, b_name, e.new)

    def to_a(e: Any) -> None:
        if getattr(a, a_name) != e.new:
            setattr(a, a_name, e.new)

    a.param.watch(to_b, a_name)
    b.param.watch(to_a, b_name)


def in_session(fn: Callable[..., Any]) -> Callable[..., None]:
    """``fn`` run in the page's session: called from a worker thread (a job finishing), it is
    scheduled on the page's event loop with the page's document current, so the models it
    creates get the page's (local) resources and the document lock.

    Before the page is up (the browser has pulled the document but not yet said it is
    drawn) ``fn`` waits for it: Panel 1.9 drops the changes a layout makes in that window
    (``panel.io.document.hold`` counts on a full serialization that has already been sent),
    so a job ending then (a link's Compare re-run) left the page without its result and
    the browser later reported "reference pNNNN isn't known".

    In a notebook ``fn`` runs on the kernel's thread (:mod:`..owner_thread`): Panel sends a
    change from the thread that makes it, and two threads sending at once lose updates."""
    from panel.io.state import set_curdoc

    doc = pn.state.curdoc
    owner = threading.get_ident()
    box = mailbox()  # a notebook: the kernel's thread

    def run(*args: Any) -> None:
        if doc is None or doc.session_context is None or threading.get_ident() == owner:
            box.call(fn, *args)
            return

        release = hold()  # the server's warm-up waits until it has run

        def scheduled() -> None:
            try:
                with set_curdoc(doc):
                    if pn.state.loaded:
                        fn(*args)
                    else:  # run by Panel once the page is up, in order, on this loop
                        pn.state.onload(lambda: fn(*args))
            finally:
                release()

        doc.add_next_tick_callback(scheduled)

    return run


def served() -> bool:
    """Whether this runs for a served page (a browser session), not a notebook or a test."""
    doc = pn.state.curdoc
    return doc is not None and doc.session_context is not None


def later(work: Callable[[], Any], then: Callable[[Any], None], name: str) -> None:
    """``then(work())``: for a served page, ``work`` in a daemon thread started once the
    page is up in the browser and ``then`` back in the page's session (the page is neither
    held nor slowed by it); elsewhere both at once."""
    if not served():
        then(work())
        return
    back = in_session(then)

    def run() -> None:
        try:
            with working():  # the server's warm-up waits meanwhile
                result = work()
        except Exception:  # nothing to add to the page; the view that needs it says why
            return
        back(result)

    pn.state.onload(lambda: threading.Thread(target=run, name=name, daemon=True).start())


def watch(obj: Any, fn: Callable[..., Any], names: str | list[str]) -> None:
    """``obj.param.watch(fn, names)``, with ``fn`` run in the page's session."""
    obj.param.watch(in_session(fn), names)


class Drawn:
    """What a view's results were last drawn from, so that a redraw for the same state is
    skipped.

    A view's watcher runs in the page's session, queued (:func:`in_session`): events of one
    job end in a burst (a streamed row still queued when the result lands, two parameters of
    one update watched apart) and each queued call reads the state as it is when it runs,
    so two of them would draw the same result twice. The second drawing replaces the table
    or chart the browser has just shown with a new model, and a click made on the first
    between the two (a Compare row, a Timeline heatmap cell) reaches a model no longer in
    the page and is lost: the click opens nothing."""

    def __init__(self) -> None:
        self._key: tuple[Any, ...] | None = None

    def new(self, *key: Any) -> bool:
        """Whether ``key`` (the objects and values a drawing shows) differs from the last
        one drawn; it becomes the last one. Objects are compared by identity, strings,
        numbers and tuples of them by value."""
        old, self._key = self._key, key
        return old is None or len(old) != len(key) or not all(map(_same, old, key))

    def forget(self) -> None:
        """The results show something else now (a placeholder, an error): the next drawing
        is new whatever its key."""
        self._key = None


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    plain = (str, int, float, bool, tuple, type(None))
    return isinstance(a, plain) and isinstance(b, plain) and a == b


def keep_sort(app: Any, tab: str, tbl: Any) -> None:
    """``tbl`` sorted as ``app.sorts[tab]`` says (a link's ``sort=``), and a click on its
    headers kept there (and so in the address). A sort by a column the table lacks is
    ignored."""
    apply_sort(app, tab, tbl)

    def back(e: Any) -> None:
        new = [{"field": s.get("field"), "dir": s.get("dir")} for s in e.new or []]
        if new != app.sorts.get(tab, []):
            app.sorts = {**app.sorts, tab: new}

    tbl.param.watch(back, "sorters")


def apply_sort(app: Any, tab: str, tbl: Any) -> None:
    """Sort ``tbl`` as ``app.sorts[tab]`` says, when its columns allow."""
    want = app.sorts.get(tab) or []
    cols = set(map(str, tbl.value.columns)) if tbl.value is not None else set()
    if want and all(s.get("field") in cols for s in want) and tbl.sorters != want:
        tbl.sorters = [dict(s) for s in want]
