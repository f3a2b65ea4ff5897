"""The dashboard in the classic Notebook (nbclassic, the Notebook 6 page on today's Jupyter
server), offline: the same checks as the JupyterLab test (tests/ui/test_ui_jupyterlab.py). The
classic page runs RequireJS, as VS Code's notebooks do for widgets: there the UMD bundles Panel
puts inline (Tabulator, plotly.js) registered as AMD modules instead of setting their globals,
and the cell's output stayed empty ("Tabulator is not defined"). A fresh kernel's first cell
shows the dashboard and every tab draws, with every request that would leave 127.0.0.1 aborted
and failing the test. Screenshots stay in the test's tmp dir (``classic-*.png``).
scripts/setup_env.sh installs nbclassic in ``.venv/side/nbclassic``."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from test_ui_jupyterlab import FIRST_CELL, _skip_reason, check_every_tab, lab_server, notebook

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
    out, manifest = real_checkpoints("timeline")
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(out / manifest["cases"]["hf_clean"]["path"], work / "run")
    (work / "dashboard.ipynb").write_text(json.dumps(notebook([FIRST_CELL])))
    home = tmp_path / "jupyter"
    home.mkdir()
    with lab_server(work, home, app="nbclassic", path=(side,)) as url:
        problems = check_every_tab(browser, url, tmp_path, "classic")
    assert problems == [], f"(screenshots in {tmp_path})\n" + "\n".join(p[:300] for p in problems)
