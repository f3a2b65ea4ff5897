"""The walkthrough notebooks run top to bottom in a real kernel and show the dashboard."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
PANEL_MIME = "application/vnd.holoviews_exec.v0+json"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_renders_the_dashboard(
    notebook: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbclient = pytest.importorskip("nbclient")
    import nbformat

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(notebook, work / notebook.name)
    nb = nbformat.read(work / notebook.name, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(work)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    panels = [o for o in outputs if PANEL_MIME in o.get("data", {})]
    assert panels, "no Panel output in the executed notebook"
    html = "".join(str(o["data"].get("text/html", "")) for o in panels)
    assert "ckpt_explorer" in html or "bokeh" in html.lower()
    # rendered offline: Bokeh and Panel's JS are inlined in the notebook (megabytes), not
    # fetched from a CDN when the notebook is opened
    loads = [o for o in outputs if "application/vnd.holoviews_load.v0+json" in o.get("data", {})]
    assert max(len(str(o["data"])) for o in loads) > 1_000_000
