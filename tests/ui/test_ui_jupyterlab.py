"""The dashboard in a real JupyterLab, offline: a notebook's first cell shows it, every tab draws.

A JupyterLab server runs on 127.0.0.1 (a free port, a token, its config, data and runtime
folders in the test's tmp dir, a kernel registered there for this Python); Debian's chromium
opens a notebook whose one cell calls the public API, runs it, clicks each tab and checks that
the tab drew its view. Every request that would leave 127.0.0.1 is aborted and recorded (so
the test is offline by construction) and must not happen; no console error may say a model's
type could not be resolved, no button may reach past the output's right edge. The walkthrough
notebooks (notebooks/01..03) run there as a newcomer runs them, and what their dashboards show
is checked against the CLI's ``--json`` for the same files. One server for the module;
screenshots stay in its tmp dir (``lab-*.png``, ``walk-*.png``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import CHROMIUM, REPO, free_port
from ui_pages import cut_text

from ckpt_explorer.ui.numbers import fmt_bytes

pytestmark = pytest.mark.timeout(900)

KERNEL = "ckpt-explorer-test"
# a notebook output: JupyterLab and Notebook 7, the classic Notebook
OUTPUT_AREA = ".jp-OutputArea-output, .output_subarea"
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
WALKTHROUGHS = (
    "01_loss_mismatch_after_resume.ipynb",
    "02_pre_release_validation.ipynb",
    "03_conversion.ipynb",
)
FIRST_CELL = """\
from ckpt_explorer import Explorer

Explorer("run/checkpoint-4", "run/checkpoint-6", root=".")
"""
# what each tab draws once shown (a visible text only that view has), in tab order
TAB_MARKS = {
    "Overview": "Data types (by bytes)",
    "Weight map": "Shard sizes",
    "Optimizer": "Optimizer of",
    "Compare": "/Choose A and B, then Compare|Per layer: largest relative L2/",
    "Validate": "press Validate",
    "Resume doctor": "/Pick the checkpoint you resumed from|Likely causes/",
    "Convert": "1 · What to convert",
    "Layout": "Rules of ColossalAI",
    "Timeline": "Run folder",
}


# the page's notebook has its kernel, idle (JupyterLab and Notebook 7; the classic Notebook)
KERNEL_IDLE = """() => { if (window.Jupyter && window.Jupyter.notebook) {
    const k = window.Jupyter.notebook.kernel; return !!k && k.is_connected(); }
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle'; }"""
# every cell of the page's notebook run
RUN_ALL = """() => window.Jupyter && window.Jupyter.notebook
  ? window.Jupyter.notebook.execute_all_cells()
  : window.jupyterapp.commands.execute('notebook:run-all-cells')"""
# buttons shown in an output that reach past its right edge (cut off by the output area)
CLIPPED_BUTTONS = """() => { const out = [];
  document.querySelectorAll(OUTPUTS).forEach((area) => {
    const edge = area.getBoundingClientRect().right + 1;
    const walk = (n) => {
      if (n.shadowRoot) walk(n.shadowRoot);
      for (const c of n.children || []) {
        if (c.nodeName === 'BUTTON') {
          const r = c.getBoundingClientRect();
          if (r.width > 0 && r.height > 0 && r.right > edge) out.push(c.textContent.trim());
        }
        walk(c);
      }
    };
    walk(area);
  });
  return out; }"""
# a code cell of the page's notebook has run or is queued ("[*]")
STARTED = """() => { if (window.Jupyter && window.Jupyter.notebook)
    return window.Jupyter.notebook.get_cells().some((c) => c.cell_type === 'code' &&
      c.input_prompt_number !== null && c.input_prompt_number !== undefined);
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const cells = (w && w.content && w.content.widgets) || [];
  return cells.some((c) => c.model.type === 'code' && (c.model.executionCount !== null ||
    (c.promptNode && c.promptNode.textContent.includes('*')))); }"""
# every code cell of the page's notebook has run, none is queued or running
RAN_ALL = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const cells = w && w.content && w.content.widgets;
  return !!cells && cells.every((c) => c.model.type !== 'code' ||
    (c.model.executionCount !== null && !(c.promptNode && c.promptNode.textContent.includes('*'))));
}"""
OUTPUT_TEXT = """(() => { const out = []; const walk = (n) => {
  if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.childNodes) {
    if (c.nodeType === 3) out.push(c.textContent);
    else if (!['SCRIPT', 'STYLE'].includes(c.nodeName)) walk(c);
  }
}; document.querySelectorAll(OUTPUTS).forEach(walk);
return out.join(' ').replace(/\\s+/g, ' '); })()"""
CLIPPED_BUTTONS, OUTPUT_TEXT = (
    js.replace("OUTPUTS", repr(OUTPUT_AREA)) for js in (CLIPPED_BUTTONS, OUTPUT_TEXT)
)


def _skip_reason() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is not installed (run scripts/setup_env.sh with WITH_BROWSER=1)"
    for module, what in (("playwright", "playwright"), ("jupyterlab", "jupyterlab 4.6")):
        if importlib.util.find_spec(module) is None:
            return f"{what} is not installed in this environment (scripts/setup_env.sh)"
    return None


def notebook(cells: list[str]) -> dict[str, Any]:
    """A notebook of code ``cells`` bound to the kernel registered by :func:`lab_server`."""
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"cell-{i}",
                "metadata": {},
                "outputs": [],
                "source": src,
            }
            for i, src in enumerate(cells)
        ],
        "metadata": {
            "kernelspec": {"display_name": KERNEL, "language": "python", "name": KERNEL},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


@contextlib.contextmanager
def lab_server(
    work: Path, home: Path, app: str = "jupyterlab", path: tuple[str, ...] = ()
) -> Iterator[str]:
    """``jupyter lab`` (Notebook 7 when ``app`` is ``"notebook"``, the classic Notebook when it
    is ``"nbclassic"``, its package in one of ``path``) serving ``work`` on 127.0.0.1 with
    every Jupyter folder under ``home`` and a kernel named :data:`KERNEL` for this Python;
    yields the URL of ``dashboard.ipynb`` with its token. Only the process started here is
    stopped."""
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "IPYTHONDIR": str(home / "ipython"),
        "JUPYTER_PLATFORM_DIRS": "1",
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO), *path, os.environ.get("PYTHONPATH")])
        ),
    }
    # no news feed, no update check, no PyPI extension manager: nothing for the page to ask
    settings = home / "config" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    # the kernel this test runs: this interpreter, registered in the test's data folder only
    subprocess.run(
        [sys.executable, "-m", "ipykernel", "install", "--user", "--name", KERNEL],
        env=env,
        check=True,
        capture_output=True,
    )
    port, token = free_port(), secrets.token_hex(16)
    cmd = [
        sys.executable,
        "-m",
        app,
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        "--ServerApp.open_browser=False",
        f"--ServerApp.root_dir={work}",
    ]
    if app == "notebook":  # window.jupyterapp: run the cells by command
        cmd.append("--JupyterNotebookApp.expose_app_in_browser=True")
    elif app == "nbclassic":  # window.Jupyter: the classic page's own
        pass
    else:
        cmd += ["--LabApp.expose_app_in_browser=True", "--LabApp.extension_manager=readonly"]
    if os.geteuid() == 0:  # a container's root user (jupyter refuses root without it)
        cmd.append("--allow-root")
    log = open(home / f"{app}.log", "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{app} exited with {proc.returncode}; see {log.name}")
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=10) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{app} did not answer within 120 s; see {log.name}")
                time.sleep(0.5)
        page = {"notebook": "notebooks", "nbclassic": "nbclassic/notebooks"}.get(app, "lab/tree")
        yield f"{base}/{page}/dashboard.ipynb?token={token}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


class Offline:
    """Aborts every request that would leave 127.0.0.1 and records its URL."""

    def __init__(self) -> None:
        self.left: list[str] = []

    def __call__(self, route: Any) -> None:
        url = route.request.url
        parts = urllib.parse.urlsplit(url)
        if parts.scheme in ("data", "blob") or parts.hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            self.left.append(url)
            route.abort()


def run_all_cells(page: Any) -> None:
    """Runs every cell of the page's notebook. A run asked for while the notebook is still
    settling after its kernel became idle can be dropped: asked again until a cell starts."""
    for _ in range(5):
        page.evaluate(RUN_ALL)
        try:
            page.wait_for_function(STARTED, timeout=20_000)
            return
        except Exception:
            continue
    pytest.fail("no cell of the notebook started running")


def output_text(page: Any) -> str:
    """The text of the notebook's outputs (through Panel's shadow roots)."""
    return str(page.evaluate(OUTPUT_TEXT))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, real_checkpoints: Any) -> Iterator[LabSite]:
    """One JupyterLab for the module, serving a folder with a run copied from the timeline
    fixture, the dashboard notebook and the walkthrough notebooks."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("lab")
    out, manifest = real_checkpoints("timeline")
    work = base / "work"
    work.mkdir()
    shutil.copytree(out / manifest["cases"]["hf_clean"]["path"], work / "run")
    (work / "dashboard.ipynb").write_text(json.dumps(notebook([FIRST_CELL])))
    for nb in WALKTHROUGHS:  # bound to the test's kernel, run as a newcomer runs them
        cells = json.loads((REPO / "notebooks" / nb).read_text())["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        (work / nb).write_text(json.dumps(notebook(code)))
    home = base / "jupyter"
    home.mkdir()
    with lab_server(work, home) as url:
        yield LabSite(url, work, base)


class LabSite:
    """The module's JupyterLab: the dashboard notebook's URL, the served folder, a folder for
    screenshots and logs."""

    def __init__(self, url: str, work: Path, shots: Path) -> None:
        self.url, self.work, self.shots = url, work, shots

    def notebook_url(self, name: str) -> str:
        """``name`` in a workspace of its own, reset: JupyterLab otherwise restores the
        notebooks an earlier page opened, and the one in front may not be ``name``."""
        stem = Path(name).stem.replace("_", "-")
        url = self.url.replace(
            "/lab/tree/dashboard.ipynb?", f"/lab/workspaces/{stem}/tree/{name}?reset&"
        )
        return url.replace("dashboard.ipynb", name)


def record_frames(ws: Any, log: list[str]) -> None:
    """Appends each frame of the websocket ``ws`` to ``log`` (time, direction, size, its
    readable start), for finding where a kernel's update to the page is lost."""

    def keep(way: str, data: Any) -> None:
        raw = data if isinstance(data, bytes) else str(data).encode()
        text = raw.decode("utf-8", "replace")
        log.append(f"frame {time.time():.3f} {way} {len(raw)} {text[:1500]!r}")

    ws.on("framesent", lambda d: keep(">", d))
    ws.on("framereceived", lambda d: keep("<", d))


@contextlib.contextmanager
def lab_page(browser: Any, url: str, offline: Offline, console: list[str]) -> Iterator[Any]:
    """A page on ``url`` (offline, console recorded) once the notebook's kernel is idle."""
    context = browser.new_context(viewport={"width": 1500, "height": 1100})
    try:
        context.route("**/*", offline)
        page = context.new_page()
        page.set_default_timeout(120_000)
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: console.append(f"page error: {e}"))
        if os.environ.get("CKPT_LAB_FRAMES"):  # every kernel frame, to find a lost update
            page.on("websocket", lambda ws: record_frames(ws, console))
        page.goto(url)
        page.wait_for_function(KERNEL_IDLE, timeout=180_000)
        yield page
    finally:
        context.close()


DIFF_TABLE = ".diff-table"  # Compare's table of tensors
# a cell of a table's row in the column named (a first column: shown in every layout)
FIRST_CELL_OF = ".tabulator-row .tabulator-cell[tabulator-field='%s']"


def drawn(page: Any, selector: str, shot: Path) -> None:
    """Waits until an element matching ``selector`` is visible (a job's result on a loaded
    machine: up to 300 s); a screenshot at ``shot`` when it is not."""
    try:
        page.locator(selector).first.wait_for(timeout=300_000)
    except Exception:
        page.screenshot(path=str(shot))
        raise


def whole_tables(page: Any, table: str, what: str, shots: Path) -> list[str]:
    """The tables on screen once the one of class ``table`` is scrolled to the top of the
    window: what :data:`~ui_pages.CUT_TEXT` finds cut (none seen is a problem too), as
    problems."""
    page.locator(f".{table}").first.evaluate("(e) => e.scrollIntoView({block: 'start'})")
    time.sleep(1.0)  # let the table settle on its widths
    page.screenshot(path=str(shots))
    cut, seen = cut_text(page, OUTPUT_AREA)
    if not seen:
        return [f"{what}: no table on screen"]
    return [f"text cut in a table: {what}: {c}" for c in dict.fromkeys(cut)]


def check_results(page: Any, shots: Path, prefix: str) -> list[str]:
    """Compare, Validate and Convert run in the notebook's dashboard; their result tables
    checked for cut text (:func:`whole_tables`), Compare's row click for its A/B view and
    Convert for the output name typed; the problems. Screenshots
    ``<prefix>-result-<view>.png``."""
    out: list[str] = []
    page.locator(".bk-tab", has_text="Compare").first.click()
    page.get_by_role("button", name="Compare", exact=True).click()
    # the table's first column (the tensor's name) never folds under its row: a row drawn
    drawn(page, f"{DIFF_TABLE} {FIRST_CELL_OF % 'name'}", shots / f"{prefix}-result-no-diff.png")
    out += whole_tables(page, "diff-table", "Compare", shots / f"{prefix}-result-compare.png")
    page.locator(f"{DIFF_TABLE} {FIRST_CELL_OF % 'name'}").first.click()
    try:
        page.locator("text=Histograms of A and B").first.wait_for(timeout=90_000)
    except Exception:
        page.screenshot(path=str(shots / f"{prefix}-result-no-ab.png"))
        out.append("Compare: a row click did not open the A/B view")
    page.locator(".bk-tab", has_text="Validate").first.click()
    page.get_by_role("button", name="Validate", exact=True).click()
    drawn(page, f".findings {FIRST_CELL_OF % 'rule'}", shots / f"{prefix}-result-no-findings.png")
    out += whole_tables(page, "findings", "Validate", shots / f"{prefix}-result-validate.png")
    page.locator(".bk-tab", has_text="Convert").first.click()
    page.get_by_placeholder("e.g. model-hf").fill(f"{prefix}-converted")
    page.get_by_role("button", name="Plan", exact=True).click()
    page.locator("text=/Tick the .Model weights only|Byte copy/").first.wait_for()
    if page.locator("text=/Tick the .Model weights only/").count():
        page.locator("input[type=checkbox]:visible").first.check()  # "Model weights only"
        page.get_by_role("button", name="Plan", exact=True).click()
    try:
        page.locator(".plan-table .tabulator-cell").first.wait_for(state="attached")
    except Exception:
        page.screenshot(path=str(shots / f"{prefix}-result-no-plan.png"))
        raise
    out += whole_tables(page, "plan-table", "Convert plan", shots / f"{prefix}-result-plan.png")
    page.get_by_role("button", name="Run conversion").click()
    page.locator("text=/equals its source|Verification failed/").first.wait_for(timeout=300_000)
    if not page.get_by_text(f"{prefix}-converted").count():  # in the result's "Written to"
        out.append(f"Convert: the output named {prefix}-converted (typed before Plan) not used")
    out += whole_tables(page, "plan-table", "Convert run", shots / f"{prefix}-result-run.png")
    return out


def check_every_tab(browser: Any, url: str, shots: Path, prefix: str) -> list[str]:
    """Runs the dashboard notebook at ``url``, clicks each tab and checks that it drew its
    view (the module tree's rows included), then runs Compare, Validate and Convert
    (:func:`check_results`); the problems met (a custom model's type not resolved, a tab not
    drawn, a button cut off at the output's right edge, a table cell or header whose text is
    cut or a column past the right edge, as first drawn and in each result, Convert's output
    not the name typed, a request that tried to leave 127.0.0.1). Screenshots and the
    console go to ``shots`` (``<prefix>-<n>-<tab>.png``, ``<prefix>-console.log``)."""
    offline, console, drawn, rows, clipped, cut = Offline(), [], [], 0, [], []
    results: list[str] = []
    try:
        with lab_page(browser, url, offline, console) as page:
            run_all_cells(page)
            try:
                page.locator(".bk-tab", has_text="Overview").first.wait_for(timeout=300_000)
            except Exception:
                page.screenshot(path=str(shots / f"{prefix}-no-dashboard.png"))
                pytest.fail("no dashboard in the cell's output:\n" + output_text(page)[-3000:])
            for i, (name, mark) in enumerate(TAB_MARKS.items()):
                page.locator(".bk-tab", has_text=name).first.click()
                shot = shots / f"{prefix}-{i}-{name.replace(' ', '_')}.png"
                try:
                    page.locator(f"text={mark}").first.wait_for(timeout=120_000)
                    if name == "Weight map":  # the module tree (a custom model) draws its rows
                        page.locator(".mt-row").first.wait_for(timeout=60_000)
                        rows = page.locator(".mt-row").count()
                except Exception:
                    page.screenshot(path=str(shot))
                    drawn.append(f"{name}: {mark!r} not shown")
                    continue
                time.sleep(0.8)  # let the charts finish drawing
                page.screenshot(path=str(shot))
                clipped += [f"{name}: {b!r}" for b in page.evaluate(CLIPPED_BUTTONS)]
                cut += [f"{name}: {c}" for c in cut_text(page, OUTPUT_AREA)[0]]
            if not drawn:  # the results of the three jobs read whole too
                results = check_results(page, shots, prefix)
    finally:
        (shots / f"{prefix}-console.log").write_text("\n".join(console))
    problems = [m for m in console if "could not resolve type" in m]
    problems += [f"tab {d}" for d in drawn]
    if rows < 2:
        problems.append(f"the module tree drew {rows} rows")
    problems += [f"button cut off at the output's right edge: {c}" for c in clipped]
    problems += [f"text cut in a table: {c}" for c in dict.fromkeys(cut)]
    problems += results
    problems += [f"request left 127.0.0.1 (aborted): {u}" for u in offline.left]
    return problems


def dashboard_problems(
    tmp_path: Path,
    real_checkpoints: Any,
    browser: Any,
    app: str,
    prefix: str,
    path: tuple[str, ...] = (),
) -> list[str]:
    """A ``app`` server (see :func:`lab_server`) on a folder with a run of the timeline fixture
    and the dashboard notebook: :func:`check_every_tab`'s problems, screenshots in
    ``tmp_path``."""
    out, manifest = real_checkpoints("timeline")
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(out / manifest["cases"]["hf_clean"]["path"], work / "run")
    (work / "dashboard.ipynb").write_text(json.dumps(notebook([FIRST_CELL])))
    home = tmp_path / "jupyter"
    home.mkdir()
    with lab_server(work, home, app=app, path=path) as url:
        return check_every_tab(browser, url, tmp_path, prefix)


def test_jupyterlab_shows_every_view_offline(lab: LabSite, browser: Any) -> None:
    """A fresh kernel's first cell shows the dashboard; each of its tabs draws its view (the
    Weight map's module tree included) with nothing fetched from outside 127.0.0.1. (The
    session's chromium: a second Playwright in the same thread is refused.)"""
    problems = check_every_tab(browser, lab.url, lab.shots, "lab")
    assert problems == [], f"(screenshots in {lab.shots})\n" + "\n".join(p[:300] for p in problems)


def run_walkthrough(lab: LabSite, browser: Any, name: str) -> tuple[str, list[str], list[str]]:
    """Runs the walkthrough notebook ``name`` top to bottom in JupyterLab; its outputs' text,
    the console's errors and the requests that tried to leave 127.0.0.1. A screenshot of
    each dashboard it shows is kept (``walk-<notebook>-<n>.png``)."""
    offline, console = Offline(), []
    with lab_page(browser, lab.notebook_url(name), offline, console) as page:
        in_front = "() => { const w = window.jupyterapp.shell.currentWidget; "
        in_front += f"return !!(w && w.context && w.context.path.endsWith({name!r})); }}"
        page.wait_for_function(in_front, timeout=60_000)  # run-all acts on the notebook in front
        run_all_cells(page)
        page.wait_for_function(RAN_ALL, timeout=600_000)
        page.wait_for_function(KERNEL_IDLE, timeout=600_000)
        time.sleep(1.5)  # let the last output draw
        shown = page.locator(".jp-OutputArea-output:has(.bk-tab)")
        for i in range(shown.count()):
            with contextlib.suppress(Exception):
                shown.nth(i).scroll_into_view_if_needed(timeout=10_000)
                page.screenshot(path=str(lab.shots / f"walk-{Path(name).stem}-{i}.png"))
        text = output_text(page)
    errors = [m for m in console if m.startswith(("error", "page error"))]
    return text, errors, offline.left


def cli_json(*args: str) -> Any:
    """``ckpt-explorer ARGS --json`` in a child process: its parsed output."""
    out = subprocess.run(
        [sys.executable, "-m", "ckpt_explorer", *args, "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.stdout.lstrip().startswith("{"), (args, out.returncode, out.stderr[-3000:])
    return json.loads(out.stdout)


def test_walkthrough_resume_runs_in_jupyterlab(lab: LabSite, browser: Any) -> None:
    """Workflow 1 as a newcomer runs it: every dashboard opens what the notebook names (paths
    relative to the working directory, as Python means them, with a ``root`` below it), and
    the doctor's ranked causes are the CLI's (``doctor --json``) for the same folders."""
    text, errors, left = run_walkthrough(lab, browser, WALKTHROUGHS[0])
    demo = lab.work / "walkthrough-resume"
    assert "found nothing there" not in text, text[:2000]
    report = cli_json("doctor", str(demo / "resumed_from"), str(demo / "after_resume"))
    for cause in report["causes"]:
        assert f"{cause['title']} {cause['score']:.2f}" in text, (cause, text[-3000:])
    assert errors == [] and left == [], (errors, left)


def test_walkthrough_release_validates_in_jupyterlab(lab: LabSite, browser: Any) -> None:
    """Workflow 2: the Validate view lists the CLI's findings (``validate --json``) for the
    GPT-2 release the notebook writes (transformers ``save_pretrained``), each with its hint,
    and no hint sends the user after a shard when every shard is there (the tied
    ``lm_head.weight`` that ``save_pretrained`` leaves out is not a missing shard)."""
    text, errors, left = run_walkthrough(lab, browser, WALKTHROUGHS[1])
    release = lab.work / "walkthrough-release" / "gpt2-tiny"
    assert "found nothing there" not in text, text[:2000]
    report = cli_json("validate", str(release))
    assert report["findings"], report
    flat = "".join(text.split())  # names break after "." by a <wbr>: compare without spaces
    for f in report["findings"]:
        for field in ("rule", "message", "hint"):
            assert "".join(f[field].split()) in flat, (field, f, text[-3000:])
    assert "Copy the missing shard again" not in text, text[-3000:]
    assert errors == [] and left == [], (errors, left)


def test_walkthrough_conversion_in_jupyterlab(lab: LabSite, browser: Any, tmp_path: Path) -> None:
    """Workflow 3: the Convert view converts the checkpoint the notebook opened (said on
    screen), writes what ``convert --dry-run --json`` plans for the same file (its tensor
    count and size) and verifies it; the output reads back equal with safetensors itself."""
    text, errors, left = run_walkthrough(lab, browser, WALKTHROUGHS[2])
    flat = "".join(text.split())
    assert "found nothing there" not in text, text[:2000]
    assert "Convertspytorch_model.bin—thecheckpointopeninthesidebar" in flat, text[-3000:]
    source = lab.work / "walkthrough-convert" / "pytorch_model.bin"
    plan = cli_json(
        "convert", str(source), str(tmp_path / "x.safetensors"), "--to", "safetensors", "--dry-run"
    )["plan"]
    size = "".join(fmt_bytes(plan["total_bytes"]).split())  # the card's and the log's unit
    assert f"written:{size}in1file" in flat, (size, text[-3000:])
    assert f"tensors{plan['tensors']}," in flat, text[-3000:]
    assert "verified:everyoutputtensorequalsitssource" in flat, text[-3000:]
    assert "['0.bias', '0.weight', '2.bias', '2.weight'] True" in text, text[-3000:]
    assert errors == [] and left == [], (errors, left)
