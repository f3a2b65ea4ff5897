"""The dashboard in the classic Notebook (nbclassic, the Notebook 6 page on today's Jupyter
server), offline: the same checks as the JupyterLab test (tests/ui/test_ui_jupyterlab.py). The
classic page runs RequireJS, as VS Code's notebooks do for widgets: there the UMD bundles Panel
puts inline (Tabulator, plotly.js) registered as AMD modules instead of setting their globals,
and the cell's output stayed empty ("Tabulator is not defined"). A fresh kernel's first cell
shows the dashboard and every tab draws, with every request that would leave 127.0.0.1 aborted
and failing the test. Screenshots stay in the test's tmp dir (``classic-*.png``).
scripts/setup_env.sh installs nbclassic in ``.venv/side/nbclassic``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from test_ui_jupyterlab import _skip_reason, dashboard_problems

pytestmark = pytest.mark.timeout(900)


def _nbclassic_folder() -> str | None:
    """The side folder holding nbclassic (``$CKPT_NBCLASSIC_SIDE`` or the environment's)."""
    for c in (
        os.environ.get("CKPT_NBCLASSIC_SIDE", ""),
        os.path.join(sys.prefix, "side", "nbclassic"),
        str(REPO / ".venv" / "side" / "nbclassic"),
    ):
        if c and os.path.isdir(os.path.join(c, "nbclassic")):
            return c
    return None


def test_classic_notebook_shows_every_view_offline(
    tmp_path: Path, real_checkpoints: Any, browser: Any
) -> None:
    """Classic Notebook page, fresh kernel: the dashboard notebook runs and each tab draws."""
    side = _nbclassic_folder()
    reason = _skip_reason() or (None if side else "nbclassic is not installed (setup_env.sh)")
    if reason:
        pytest.skip(reason)
    assert side is not None
    problems = dashboard_problems(
        tmp_path, real_checkpoints, browser, "nbclassic", "classic", path=(side,)
    )
    assert problems == [], f"(screenshots in {tmp_path})\n" + "\n".join(p[:300] for p in problems)
