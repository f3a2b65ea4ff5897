"""plotly.js fetched by a lean page when its first chart is drawn (see :mod:`..lean_page`).

Panel's Plotly view draws with ``window.Plotly`` and draws nothing when it is absent. The
loader teaches that view to wait: its first draw fetches plotly.js from the page's own server
(once per page) and then draws the figure as the model holds it then; any draw asked for in
the meantime is folded into that one. Charts built before the loader ran are drawn once
plotly.js is there. The page also fetches it once idle, ten seconds after it is drawn, so a
later first chart does not wait. One invisible element per lean page, before any tab is built.
"""

from __future__ import annotations

import json
from typing import Any

import param
from panel.custom import JSComponent

from ..lean_page import PLOTLY_MODEL

IDLE_FETCH_MS = 10_000  # after the loader is drawn, plotly.js is fetched when the page is idle
# (later than a first screen and its first clicks: parsing 4.8 MB would hold them up)

LOADER_ESM = f"""
const model = window.Bokeh && Bokeh.Models.get({json.dumps(PLOTLY_MODEL)});
const View = model && model.prototype.default_view;

// the bundle's URL, given by the loader's model when it renders
if (!window.__ckpt_plotly_src) {{
  let give;
  window.__ckpt_plotly_src = new Promise((resolve) => {{ give = resolve; }});
  window.__ckpt_plotly_src.give = give;
}}

function plotly() {{
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!window.__ckpt_plotly) {{
    window.__ckpt_plotly = window.__ckpt_plotly_src.then((src) => new Promise((resolve, reject) => {{
      const script = document.createElement("script");
      script.src = src;
      script.onload = () => resolve(window.Plotly);
      script.onerror = () => {{
        window.__ckpt_plotly = null;
        reject(new Error(`plotly.js could not be loaded from ${{src}}`));
      }};
      document.head.appendChild(script);
    }}));
  }}
  return window.__ckpt_plotly;
}}

if (View && !View.prototype.__ckpt_waits_for_plotly) {{
  const plot = View.prototype.plot;
  View.prototype.plot = function (new_plot = false) {{
    if (window.Plotly && this.__ckpt_first == null) return plot.call(this, new_plot);
    if (this.__ckpt_first == null) {{
      this.__ckpt_first = plotly().then(() => {{
        this.__ckpt_first = null;
        return plot.call(this, true);
      }});
    }}
    return this.__ckpt_first;
  }};
  const remove = View.prototype.remove;
  View.prototype.remove = function () {{
    if (window.Plotly) return remove.call(this);
    const container = this.container;
    this.container = null;  // never drawn: nothing for plotly to purge
    try {{
      return remove.call(this);
    }} finally {{
      this.container = container;  // a first draw still pending finds its element
    }}
  }};
  View.prototype.__ckpt_waits_for_plotly = true;
}}

export function render({{ model, el }}) {{
  el.style.display = "none";
  window.__ckpt_plotly_src.give(model.src);
  if (View && !window.Plotly) {{
    // charts built before this script ran drew nothing: draw them now
    for (const view of Bokeh.index.query((v) => v instanceof View)) {{
      if (!view._plotInitialized) view.plot(true).then(() => view.resize_layout());
    }}
    const idle = window.requestIdleCallback || ((fn) => setTimeout(fn, 0));
    setTimeout(() => idle(() => plotly().catch(() => null)), {IDLE_FETCH_MS});
  }}
}}
"""


class PlotlyLoader(JSComponent):  # type: ignore[misc]
    """An invisible element whose script makes the page's plotly charts fetch plotly.js."""

    src = param.String(default="", doc="plotly.js's URL, relative to the page")

    _esm = LOADER_ESM

    def __init__(self, **params: Any) -> None:
        super().__init__(width=0, height=0, margin=0, **params)
