"""A served page's head without the bundles its first screen does not draw.

Panel 1.9 writes into a served page's head the scripts of every model class its process has
loaded, so the browser fetches and parses them all before the first view shows: plotly.js
(4.8 MB, because some view draws a plotly chart) and bokeh-mathjax (1.8 MB, because a
Markdown pane might hold TeX). For a page marked lean (:func:`mark`):

- plotly.js (and the map style sheet it brings, for map traces the dashboard never draws)
  stays out of the head; the page's
  :class:`~.components.plotly_loader.PlotlyLoader` fetches it from the same server (never a
  CDN) when a chart is first drawn, or once the page is idle;
- MathJax stays out: the dashboard writes no TeX, and a ``$`` in a name stays a ``$``.

Panel decides both while it writes the page (``panel.io.resources``: a model class's
``__javascript__`` / ``__css__`` and ``_panel_use_mathjax``); they are wrapped here, for
lean pages only.
Notebook output is unchanged (everything inline, at once). With a Panel whose internals
differ, nothing is wrapped and pages load as before.
"""

from __future__ import annotations

import weakref
from pathlib import PurePosixPath
from typing import Any

PLOTLY_MODEL = "panel.models.plotly.PlotlyPlot"
_lean: weakref.WeakSet[Any] = weakref.WeakSet()  # the documents of lean pages
_installed: bool | None = None


def plotly_bundle() -> str | None:
    """The path, under the served page's folder, of the plotly.js that Panel ships (None
    when this Panel has no such file)."""
    from panel.io.resources import BUNDLE_DIR, LOCAL_DIST
    from panel.models.plotly import PlotlyPlot

    raw = getattr(PlotlyPlot, "__javascript_raw__", None) or [""]
    name = PurePosixPath(str(raw[0])).name
    if not name.endswith(".js") or not (BUNDLE_DIR / "plotlyplot" / name).is_file():
        return None
    return f"{LOCAL_DIST}bundled/plotlyplot/{name}"


def _is_lean() -> bool:
    from panel.io.state import state

    doc = state.curdoc
    return doc is not None and doc in _lean


class _ForOtherPages:
    """A class attribute that lean pages see empty and every other page as Panel made it."""

    def __init__(self, original: Any) -> None:
        self.original = original

    def __get__(self, obj: Any, owner: type) -> Any:
        if _is_lean():
            return []
        return self.original.__get__(obj, owner)


def _install() -> bool:
    global _installed
    if _installed is None:
        _installed = _wrap()
    return _installed


def _wrap() -> bool:
    try:
        from panel.io import resources
        from panel.models.plotly import PlotlyPlot
    except ImportError:
        return False
    files = {name: PlotlyPlot.__dict__.get(name) for name in ("__javascript__", "__css__")}
    use_mathjax = getattr(resources, "_panel_use_mathjax", None)
    if use_mathjax is None or plotly_bundle() is None:
        return False
    if not all(hasattr(f, "__get__") for f in files.values()):
        return False
    for name, f in files.items():
        if not isinstance(f, _ForOtherPages):
            setattr(PlotlyPlot, name, _ForOtherPages(f))

    def panel_use_mathjax(roots: Any) -> bool:
        return False if _is_lean() else bool(use_mathjax(roots))

    resources._panel_use_mathjax = panel_use_mathjax
    return True


def mark(doc: Any) -> str | None:
    """Mark ``doc``'s page lean; the URL its loader fetches plotly.js from (relative to the
    page, as Panel writes its other bundles), or None when this Panel does not allow it (the
    page then loads everything at launch, as before)."""
    from panel.io.state import state

    if doc is None or not _install():
        return None
    bundle = plotly_bundle()
    if bundle is None:
        return None
    _lean.add(doc)
    return f"{state.rel_path}/{bundle}" if state.rel_path else bundle
