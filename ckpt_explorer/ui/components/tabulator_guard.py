"""Panel's Tabulator view, taught to wait for its table before following the model.

Panel 1.9's Tabulator view connects its property handlers when the view is made and builds
the Tabulator table later, when it renders. A change arriving in between (a checkpoint opened
while a tab shown for the first time is still rendering its table) ran ``setMaxPage`` on a
table not built yet: the page threw "reading 'setMaxPage'" and the rest of that update, the
tensor count with it, never reached the page. The guard drops a property change while the
view has no table; the render then builds the table from the model's current values, so
nothing is lost. It is installed once per page, before any tab's table is made.
"""

from __future__ import annotations

from typing import Any

from panel.custom import JSComponent

TABULATOR_MODEL = "panel.models.tabulator.DataTabulator"

GUARD_ESM = f"""
const model = window.Bokeh && Bokeh.Models.get("{TABULATOR_MODEL}");
const View = model && model.prototype.default_view;
if (View && !View.prototype.__waits_for_table) {{
  const on_change = View.prototype.on_change;
  View.prototype.on_change = function (properties, fn) {{
    return on_change.call(this, properties, (...args) => {{
      if (this.tabulator != null) return fn.apply(this, args);
    }});
  }};
  View.prototype.__waits_for_table = true;
}}
export function render({{ el }}) {{ el.style.display = "none"; }}
"""


class TabulatorGuard(JSComponent):  # type: ignore[misc]
    """An invisible element whose script installs the guard when the page renders it."""

    _esm = GUARD_ESM

    def __init__(self, **params: Any) -> None:
        super().__init__(width=0, height=0, margin=0, **params)
