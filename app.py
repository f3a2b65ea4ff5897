"""The ckpt_explorer dashboard: ``panel serve app.py``.

For now a single page: pick a checkpoint and see its format, evidence and tensors. The full
dashboard (compare, validate, resume doctor, convert) builds on the same API.
"""

from __future__ import annotations

import os

import panel as pn

from ckpt_explorer import CkptExplorerError, open_checkpoint
from ckpt_explorer.inspect_report import inspect_report

pn.extension("tabulator")


def _render(path: str) -> pn.viewable.Viewable:
    if not path:
        return pn.pane.Markdown("Enter the path of a checkpoint file or folder.")
    try:
        view = open_checkpoint(path)
    except CkptExplorerError as e:
        return pn.pane.Alert(e.one_line(), alert_type="danger")
    report = inspect_report(view)
    import pandas as pd

    table = pd.DataFrame(report["tensors"]).drop(columns=["offset"], errors="ignore")
    evidence = "\n".join(f"- {e}" for e in report["evidence"])
    return pn.Column(
        pn.pane.Markdown(f"**{report['format']}** ({report['kind']})\n\n{evidence}"),
        pn.widgets.Tabulator(
            table,
            pagination="remote",
            page_size=50,
            sizing_mode="stretch_width",
            header_filters=True,
            disabled=True,
        ),
    )


path_input = pn.widgets.TextInput(
    name="Checkpoint path", value=os.environ.get("CKPT_EXPLORER_PATH", "")
)
pn.template.FastListTemplate(
    title="ckpt_explorer",
    main=[path_input, pn.bind(_render, path_input)],
).servable()
