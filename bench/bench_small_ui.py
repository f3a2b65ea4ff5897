"""The dashboard and the CLI on a small checkpoint (issue 35, item 8: fast for small things).

    .venv/bin/python bench/bench_small_ui.py [--repeats 3] [--against OTHER_CHECKOUT] [--json-out FILE]

The checkpoint is the demo's training state (``make_demo``: model, optimizer, scheduler,
RNG; about 8 MiB, made once under bench/.data/small_ui/). Each repeat starts
``ckpt-explorer serve A B`` twice and drives Debian's chromium through Playwright, timing
what a person waits for, against the goals of the issue (2 s each, "after the page loads"):

- **running server** (the goal's case): the server was started and has finished its start-up
  work (its CPU idle for three seconds in a row) before the page is requested;
- **fresh server**: the page is requested as soon as the server listens (``serve --show``).

For each: ``page_to_overview_s`` (page request → the Overview's cards), ``load_event_s``
(page request → the browser's load event), ``tabs_usable_s`` (page request → a click on the
Weight map tab, made once the Overview shows, has drawn table rows) and ``tabs_after_load_s``
(the same from the load event), ``server_cpu_page_s`` (server CPU seconds from the page
request to then), ``first_compare_s`` (a click on Compare, A and B prefilled, until the
verdict shows: the server's first diff) and ``first_compare_cpu_s`` (server CPU over it).

A floor in the same run: a bare Panel page with the dashboard's extensions (tabulator,
plotly) and template, two tabs and a one-row table, timed the same way (what any such Panel
page costs here, whatever it shows).

Then the CLI, each a fresh process: ``validate`` of the demo state (wall and CPU seconds of
the child, from ``wait4``). Baselines in the same run: ``python -c pass``, ``import panel``
and ``import torch``. ``--against DIR`` runs another checkout (e.g. main before a change) in
the same run, alternating with this one. A benchmark, not a test: it prints figures and
asserts none. The large-checkpoint figures are bench_dashboard.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
from bench_dashboard import (  # noqa: E402  (bench/ is not a package)
    ARGS,
    CHROMIUM,
    cpu_seconds,
    free_port,
    server_env,
    since,
    wait_text,
)

DATA = BENCH / ".data" / "small_ui"
GOAL_S = 2.0
GOALS = ("tabs_after_load_s", "first_compare_s", "validate_cpu_s")
IDLE_CPU_S = 0.03  # server CPU per second below which its start-up work is over
LOAD_EVENT = "performance.getEntriesByType('navigation')[0].loadEventStart / 1000"


def demo() -> Path:
    root = DATA / "demo"
    if not (root / "after_resume").exists():
        from ckpt_explorer.demo import make_demo

        make_demo(root)
    return root


def child(cmd: list[str], env: dict[str, str], cwd: Path = REPO) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one fresh process (run in ``cwd``: ``-m``
    imports the package from there first)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def listening(proc: subprocess.Popen[bytes], port: int) -> None:
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited with {proc.returncode}") from None
            time.sleep(0.05)


def settle(pid: int, quiet_s: int = 3, limit_s: float = 120.0) -> float:
    """Wait until the server's CPU stays under IDLE_CPU_S a second for ``quiet_s`` seconds in
    a row (longer than serve's own wait for a first page); seconds waited."""
    t0 = time.perf_counter()
    last, quiet = cpu_seconds(pid), 0
    while quiet < quiet_s and time.perf_counter() - t0 < limit_s:
        time.sleep(1.0)
        now = cpu_seconds(pid)
        quiet = quiet + 1 if now - last < IDLE_CPU_S else 0
        last = now
    return since(t0)


# The floor: Panel's page with the dashboard's extensions and template, two tabs, no
# checkpoint (what any Panel page costs the browser and the server on this machine)
FLOOR_APP = """
import sys
import pandas as pd
import panel as pn
pn.extension("tabulator", "plotly")
def page():
    table = pn.widgets.Tabulator(pd.DataFrame({"a": [1, 2]}), css_classes=["weight-map"])
    tabs = pn.Tabs(("Overview", pn.pane.Markdown("Why this is")), ("Weight map", table))
    return pn.template.BootstrapTemplate(title="floor", main=[tabs])
pn.serve({"/": page}, port=int(sys.argv[1]), address="127.0.0.1", show=False,
         threaded=False, websocket_origin=[f"127.0.0.1:{sys.argv[1]}"])
"""


def session(
    browser: Any, root: Path, running: bool, code: Path = REPO, floor: bool = False
) -> dict[str, Any]:
    port = free_port()
    cmd = [sys.executable, "-m", "ckpt_explorer", "serve", "--port", str(port), "--root"]
    cmd += [str(root), str(root / "resumed_from"), str(root / "after_resume")]
    if floor:
        cmd = [sys.executable, "-c", FLOOR_APP, str(port)]
    t_start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=code, env=server_env(code), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    out: dict[str, Any] = {}
    page = None
    try:
        listening(proc, port)
        out["serve_to_listening_s"] = since(t_start)
        if running:
            out["settled_after_s"] = settle(proc.pid)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.set_default_timeout(300_000)
        cpu_page, t_page = cpu_seconds(proc.pid), time.perf_counter()
        page.goto(f"http://127.0.0.1:{port}/", wait_until="commit")
        page.locator("text=Why this is").first.wait_for()
        out["page_to_overview_s"] = since(t_page)
        page.locator(".bk-tab", has_text="Weight map").first.click()
        page.locator(".weight-map .tabulator-row").first.wait_for()
        out["tabs_usable_s"] = since(t_page)
        out["server_cpu_page_s"] = round(cpu_seconds(proc.pid) - cpu_page, 2)
        out["load_event_s"] = round(float(page.evaluate(LOAD_EVENT)), 3)
        out["tabs_after_load_s"] = round(out["tabs_usable_s"] - out["load_event_s"], 3)
        if floor:
            return out
        page.locator(".bk-tab", has_text="Compare").first.click()
        button = page.get_by_role("button", name="Compare", exact=True)
        button.wait_for()
        cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
        button.click()
        wait_text(page, "t.includes('Verdict')")
        out["first_compare_s"] = since(t0)
        out["first_compare_cpu_s"] = round(cpu_seconds(proc.pid) - cpu0, 2)
    finally:
        if page is not None:
            page.close()
        proc.terminate()
        proc.wait(30)
    return out


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def measure(browser: Any, root: Path, code: Path, py: str) -> dict[str, Any]:
    """One round for one checkout: the CLI, a running server, a fresh server."""
    env = server_env(code)
    validate = [py, "-m", "ckpt_explorer", "validate", str(root / "resumed_from")]
    wall, cpu = child(validate, env, code)
    return {
        "cli": {"validate_s": wall, "validate_cpu_s": cpu},
        "running server": session(browser, root, True, code),
        "fresh server": session(browser, root, False, code),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--against", type=Path, help="another checkout, run alternating with this")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    root = demo()
    py = sys.executable
    codes = {"this": REPO} | ({"against": args.against.resolve()} if args.against else {})
    base: dict[str, list[float]] = {"python": [], "import panel": [], "import torch": []}
    floors: list[dict[str, Any]] = []
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in codes}
    for code in codes.values():  # one unmeasured run each: bytecode and numba caches
        child(
            [py, "-m", "ckpt_explorer", "validate", str(root / "resumed_from")],
            server_env(code),
            code,
        )
    loads = [os.getloadavg()[0]]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for i in range(args.repeats):
            env = server_env()
            base["python"].append(child([py, "-c", "pass"], env)[0])
            base["import panel"].append(child([py, "-c", "import panel"], env)[0])
            base["import torch"].append(child([py, "-c", "import torch"], env)[0])
            floors.append(session(browser, root, True, floor=True))
            for name, code in list(codes.items()) if i % 2 == 0 else list(codes.items())[::-1]:
                runs[name].append(measure(browser, root, code, py))
                print(f"{name}, repeat {i + 1}: {json.dumps(runs[name][-1])}", flush=True)
            loads.append(os.getloadavg()[0])
        browser.close()
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 2**20
    print(
        f"\ndemo state {size:.1f} MiB; medians (min-max) of {args.repeats}; load average "
        f"{min(loads):.1f}-{max(loads):.1f}"
    )
    for key, values in base.items():
        print(f"  baseline {key:32s} {median(values)}")
    for key in floors[0]:
        print(f"  floor page {key:30s} {median([f[key] for f in floors])}")
    names = list(codes)
    print(f"{'':44s}" + "".join(f"{n:>22s}" for n in names))
    first = runs[names[0]][0]
    for part, figures in first.items():
        for key in figures:
            cells = [median([r[part][key] for r in runs[n]]) for n in names]
            goal = f"  goal {GOAL_S} s" if key in GOALS else ""
            print(f"{part:16s} {key:27s}" + "".join(f"{c:>22s}" for c in cells) + goal)
    if args.json_out:
        args.json_out.write_text(
            json.dumps(
                {
                    "codes": {k: str(v) for k, v in codes.items()},
                    "loads": loads,
                    "base": base,
                    "floor": floors,
                    "runs": runs,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
