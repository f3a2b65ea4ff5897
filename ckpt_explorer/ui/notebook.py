"""The dashboard in a notebook page, offline: custom models known up front, no CDN stylesheet.

Three gaps of Panel 1.9 in a notebook, closed here for the dashboard's own output:

- A custom model (a ``JSComponent`` such as the module tree) is described to the page only
  by the documents displayed after its class was defined. A view is built when its tab is
  first shown, so a class imported then reached the page unknown ("could not resolve type
  'ModuleTree1'"): :func:`prepare` imports every view before the first display.
- ``pn.extension(inline=True)`` inlines the stylesheets of the models drawn at display, but
  Panel attaches its stylesheets again, as CDN links, when a model changes later (a Markdown
  pane's text, a table's ``stylesheets``, a model added to a layout); offline those fail.
  :func:`keep_offline` inlines them on their way to the page, for every change of the
  displayed documents.
- In a page with RequireJS (the classic Notebook, nbclassic; VS Code's notebooks load it for
  widgets), the libraries ``inline=True`` puts in the page (Tabulator, plotly.js) are UMD
  bundles: seeing ``define.amd`` they register as anonymous AMD modules instead of setting
  ``window.Tabulator`` / ``window.Plotly``, and the page shows nothing ("Tabulator is not
  defined"). :data:`HIDE_AMD` hides ``define.amd`` while Panel's inline scripts run and puts
  it back once their globals exist (no-op where there is no RequireJS, as in JupyterLab).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

EXTENSIONS = ("tabulator", "plotly")  # the Panel extensions the dashboard's views use
# run before Panel's inline load: define.amd hidden until the extensions' globals exist (or 60 s)
HIDE_AMD = """(function () {
  var define = window.define;
  if (typeof define !== 'function' || !define.amd || window._ckptExplorerAmd) return;
  window._ckptExplorerAmd = define.amd;
  delete define.amd;
  var start = Date.now();
  (function restore() {
    if ((window.Bokeh && window.Tabulator && window.Plotly) || Date.now() - start > 60000) {
      define.amd = window._ckptExplorerAmd;
      delete window._ckptExplorerAmd;
    } else {
      setTimeout(restore, 50);
    }
  })();
})();"""


def prepare() -> None:
    """Load Panel's extensions inline and define every view's models (before any display)."""
    import panel as pn

    from .tabs import TAB_CLASSES

    for _, spec in TAB_CLASSES:
        importlib.import_module(f"{__package__}.components.{spec.partition(':')[0]}")
    _publish_script(HIDE_AMD)
    pn.extension(*EXTENSIONS, inline=True)


def _publish_script(js: str) -> None:
    """``js`` run by the notebook page (an output of the running cell; nothing outside IPython)."""
    try:
        from IPython import get_ipython
        from IPython.display import publish_display_data
    except ImportError:
        return
    if get_ipython() is not None:
        publish_display_data({"application/javascript": js})


def keep_offline(viewable: Any) -> None:
    """Inline Panel's CDN stylesheets in every document ``viewable`` is displayed in, now and
    on each later change (idempotent: a document is guarded once)."""
    for root, _ in list(getattr(viewable, "_models", {}).values()):
        doc = getattr(root, "document", None)
        if doc is not None and not isinstance(doc.callbacks.trigger_on_change, _InlineSheets):
            guard = _InlineSheets(doc.callbacks.trigger_on_change)
            doc.callbacks.trigger_on_change = guard
            guard.inline(doc.roots)


class _InlineSheets:
    """A document's change trigger that inlines the CDN stylesheets of the model a change is
    about and of the models it brings in *before* the change is queued, so the queued change
    never links a CDN sheet, whichever thread sends the queue and when (a job's thread updates
    the page while the kernel's does too). Models the change brings in are rewritten silently:
    the page gets them whole with the change."""

    def __init__(self, trigger: Any) -> None:
        self.trigger = trigger
        self.sheets: dict[str, Any] = {}  # CDN URL -> its inline sheet, shared in this document

    def __call__(self, event: Any) -> None:
        from bokeh.document.events import ModelChangedEvent

        if isinstance(event, ModelChangedEvent):
            if event.attr == "stylesheets" and isinstance(event.new, list | tuple):
                sheets = [self.local(s) for s in event.new]
                event.model._property_values["stylesheets"] = sheets
                event.new = sheets
            else:
                self.inline(_models(event.new), silently=True)
        self.trigger(event)

    def inline(self, models: Iterable[Any], silently: bool = False) -> None:
        """Replace the CDN stylesheets of ``models`` and of every UI element below them by
        their text from the installed Panel (``silently``: without a change event, for models
        the page has not got yet)."""
        from bokeh.models.ui import UIElement

        for model in models:
            for element in model.select({"type": UIElement}):
                if not isinstance(element, UIElement):
                    continue
                sheets = [self.local(s) for s in element.stylesheets]
                if all(a is b for a, b in zip(sheets, element.stylesheets, strict=True)):
                    continue
                if silently:
                    element._property_values["stylesheets"] = sheets
                else:
                    element.stylesheets = sheets

    def local(self, sheet: Any) -> Any:
        """``sheet`` itself, or its inline copy when it is a link to Panel's CDN files."""
        from bokeh.models import ImportedStyleSheet, InlineStyleSheet
        from panel.io.resources import CDN_DIST, DIST_DIR

        if not isinstance(sheet, ImportedStyleSheet) or not sheet.url.startswith(CDN_DIST):
            return sheet
        if sheet.url not in self.sheets:
            path = DIST_DIR / sheet.url[len(CDN_DIST) :].split("?")[0]
            if not path.is_file():
                return sheet
            self.sheets[sheet.url] = InlineStyleSheet(css=path.read_text(encoding="utf-8"))
        return self.sheets[sheet.url]


def _models(value: Any) -> list[Any]:
    """The Bokeh models a property value holds (nested in lists, tuples and dicts)."""
    from bokeh.model import Model

    if isinstance(value, Model):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return [m for v in value for m in _models(v)]
    return []
