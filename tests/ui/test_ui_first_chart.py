"""A served page's first chart does not import what only plotly's notebook renderers use
(nbformat, and through it jsonschema and rfc3987-syntax: about 1.7 CPU s of a fresh
server's first Compare, bench/bench_small_ui.py). Each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

FIRST_CHART = """
import json, sys
import plotly.graph_objects as go
from ckpt_explorer.ui.components import common
if sys.argv[1] == "served":
    common.skip_notebook_renderers()
pane = common.plot(go.Figure(go.Bar(x=[1], y=[2])))
pane.get_root()
print(json.dumps({m: m in sys.modules for m in ("nbformat", "jsonschema", "rfc3987_syntax")}))
"""


def _modules_after_first_chart(mode: str) -> dict[str, bool]:
    out = subprocess.run(
        [sys.executable, "-c", FIRST_CHART, mode], capture_output=True, text=True, check=True
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_a_served_first_chart_skips_the_notebook_renderers_imports() -> None:
    assert _modules_after_first_chart("served") == {
        "nbformat": False,
        "jsonschema": False,
        "rfc3987_syntax": False,
    }


def test_elsewhere_plotly_is_left_as_it_is() -> None:
    # a notebook keeps plotly's renderers whole (fig.show() uses nbformat); this is also
    # what a served page imported before
    assert _modules_after_first_chart("notebook")["nbformat"] is True
