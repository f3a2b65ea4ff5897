"""The dashboard in Jupyter Notebook 7 (the ``notebook`` package, the classic Notebook's
successor), offline: the same checks as the JupyterLab test (tests/ui/test_ui_jupyterlab.py),
on a Notebook 7 server. A fresh kernel's first cell shows the dashboard and every tab draws,
the module tree included, with every request that would leave 127.0.0.1 aborted and failing
the test. Screenshots stay in the test's tmp dir (``nb7-*.png``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from test_ui_jupyterlab import _skip_reason, dashboard_problems

pytestmark = pytest.mark.timeout(900)


def test_notebook7_shows_every_view_offline(
    tmp_path: Path, real_checkpoints: Any, browser: Any
) -> None:
    """Notebook 7 page, fresh kernel: the dashboard notebook runs and each tab draws."""
    reason = _skip_reason()
    if reason is None and importlib.util.find_spec("notebook") is None:
        reason = "Jupyter Notebook 7 (the `notebook` package) is not installed in this environment"
    if reason:
        pytest.skip(reason)
    problems = dashboard_problems(tmp_path, real_checkpoints, browser, "notebook", "nb7")
    assert problems == [], f"(screenshots in {tmp_path})\n" + "\n".join(p[:300] for p in problems)
