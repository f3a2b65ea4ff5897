"""The dashboard: state (param, no widgets) → components (Panel viewers) → layout.

Importing this package is light; :mod:`.layout` and the components import panel and plotly.
:class:`~ckpt_explorer.ui.explorer.Explorer` is the notebook entry point.
"""

from .explorer import Explorer

__all__ = ["Explorer"]
