"""The dashboard and the CLI on a small checkpoint (issue 35, item 8: fast for small things).

    .venv/bin/python bench/bench_small_ui.py [--repeats 3] [--json-out FILE]

The checkpoint is the demo's training state (``make_demo``: model, optimizer, scheduler,
RNG; about 8 MiB, made once under bench/.data/small_ui/). Each repeat starts a fresh
``ckpt-explorer serve A B`` and drives Debian's chromium through Playwright, timing what a
person waits for, against the goals of the issue (2 s each):

- ``page_to_overview_s``: from the page request to the Overview's cards;
- ``tabs_usable_s``: from the page request until a click on the Weight map tab has drawn
  its table rows (the tabs answer);
- ``first_compare_s``: on that fresh server, a click on Compare (A and B prefilled) until
  the verdict shows; ``first_compare_cpu_s``: the server's CPU seconds over it;
- ``server_cpu_at_tabs_s``: CPU seconds the server had used when the tabs answered.

Then the CLI, each a fresh process: ``validate`` of the demo state (wall and CPU seconds of
the child, from ``wait4``). Baselines in the same run: ``python -c pass``, ``import panel``
(the floor of any Panel server) and ``import torch``; each figure's ratio to ``import
panel`` (dashboard) or to ``import torch`` (CLI) is printed with it. A benchmark, not a
test: it prints figures and asserts none. The large-checkpoint figures are
bench_dashboard.py's.
"""

from __future__ import annotations

import argparse
import json
import os
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


def demo() -> Path:
    root = DATA / "demo"
    if not (root / "after_resume").exists():
        from ckpt_explorer.demo import make_demo

        make_demo(root)
    return root


def child(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def session(browser: Any, root: Path) -> dict[str, Any]:
    port = free_port()
    cmd = [sys.executable, "-m", "ckpt_explorer", "serve", "--port", str(port), "--root"]
    cmd += [str(root), str(root / "resumed_from"), str(root / "after_resume")]
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=server_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    out: dict[str, Any] = {}
    page = None
    try:
        import socket

        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"serve exited with {proc.returncode}") from None
                time.sleep(0.05)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.set_default_timeout(300_000)
        t_page = time.perf_counter()
        page.goto(f"http://127.0.0.1:{port}/", wait_until="commit")
        page.locator("text=Why this is").first.wait_for()
        out["page_to_overview_s"] = since(t_page)
        page.locator(".bk-tab", has_text="Weight map").first.click()
        page.locator(".weight-map .tabulator-row").first.wait_for()
        out["tabs_usable_s"] = since(t_page)
        out["server_cpu_at_tabs_s"] = round(cpu_seconds(proc.pid), 2)
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


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    root = demo()
    env = server_env()
    py = sys.executable
    base: dict[str, list[float]] = {"python": [], "import panel": [], "import torch": []}
    cli: dict[str, list[float]] = {"validate_s": [], "validate_cpu_s": []}
    pages: list[dict[str, Any]] = []
    validate = [py, "-m", "ckpt_explorer", "validate", str(root / "resumed_from")]
    child(validate, env)  # one unmeasured run: bytecode and numba caches as after install
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for _ in range(args.repeats):
            base["python"].append(child([py, "-c", "pass"], env)[0])
            base["import panel"].append(child([py, "-c", "import panel"], env)[0])
            base["import torch"].append(child([py, "-c", "import torch"], env)[0])
            wall, cpu = child(validate, env)
            cli["validate_s"].append(wall)
            cli["validate_cpu_s"].append(cpu)
            pages.append(session(browser, root))
        browser.close()
    figures: dict[str, float] = {k: median(v) for k, v in base.items()}
    figures |= {k: median(v) for k, v in cli.items()}
    for key in pages[0]:
        figures[key] = median([s[key] for s in pages])
    panel_s, torch_s = figures["import panel"], figures["import torch"]
    print(
        f"demo state: {sum(f.stat().st_size for f in root.rglob('*') if f.is_file()) / 2**20:.1f} MiB, {args.repeats} repeats (medians)"
    )
    for key, value in figures.items():
        ref = panel_s if key in pages[0] else torch_s if key.startswith("validate") else None
        ratio = (
            f"  ({value / ref:.1f}x import {'panel' if ref == panel_s else 'torch'})" if ref else ""
        )
        goal = (
            f"  goal {GOAL_S} s"
            if key in ("tabs_usable_s", "first_compare_s", "validate_cpu_s")
            else ""
        )
        print(f"{key:24s} {value:8.2f}{ratio}{goal}")
    if args.json_out:
        args.json_out.write_text(json.dumps({"figures": figures, "runs": pages}, indent=1))


if __name__ == "__main__":
    main()
