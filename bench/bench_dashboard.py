"""The dashboard at frontier scale, in a real browser: DeepSeek-V3's 90,427 tensors in 163 shards.

    .venv/bin/python bench/bench_dashboard.py [--layers 61] [--repeats 3] [--json-out FILE]
        [--against OTHER_CHECKOUT]

The folder is bench_frontier's (sparse files with real headers, made once under
bench/.data/frontier/). Each repeat starts a fresh ``ckpt-explorer serve FOLDER`` and drives
Debian's chromium through Playwright, timing what a person waits for:

- ``listening_s``: from the serve process's start to its port accepting connections;
- ``page_served_s``: from the serve process's start to the page's HTML received;
- ``overview_s`` / ``weight_map_s``: from the page request to the Overview's cards, and to the
  Weight map's table rows, count and module tree after its tab is clicked (``html_dom_load_s``:
  the browser's own navigation timing of the HTML received, DOM ready and load event, i.e.
  the scripts fetched and run; ``weight_map_cpu_s``: the server's CPU over the tab's build);
- ``filter_s``: a name typed into the filter until the count of matching tensors (known
  beforehand from the same frame) is on the page, for several filters;
- ``page_s``: "next page" until the page number changes (``filter_cpu_s``, ``page_cpu_s``:
  the server's CPU seconds over each, which a loaded machine does not stretch);
- ``tree_open_s``: a click on ``layers`` until its 61 children are drawn, and on layer 10's
  ``experts`` until its 256 are; ``tree_filter_s``: a click on layer 10 until the table
  shows its 1,558 tensors;
- ``first_detail_s``: a routed expert's fp8 weight (14.7M elements) until its figures;
  ``lm_head_first_s`` / ``lm_head_exact_s``: lm_head (926M elements) until the figures of
  its sample, and until the exact ones over every element;
- ``server_cpu_at_page_s``, ``server_cpu_at_overview_s``, ``server_cpu_s``: CPU seconds the
  server process had used when the page was served, when the Overview showed, and over the
  whole session (on a loaded machine the wall times stretch; these do not).

Medians over the repeats are printed beside ``import panel`` (the floor of any Panel
server's start) and an in-process ``open_checkpoint`` (the listing's), both timed in the same
run. The server runs with Python's bytecode cache on (as an installed package has it): if the
environment turns it off (``PYTHONDONTWRITEBYTECODE``), the bench points ``PYTHONPYCACHEPREFIX``
at bench/.data/pycache instead. ``--against DIR`` serves another checkout (e.g. the main branch before a change) in the
same run, alternating with this one, for the steps its page has (up to paging). A benchmark, not a test: it
prints figures, it asserts none.
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
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
LAYER = "model.layers.10."  # the module clicked in the tree
FILTERS = ["layers.5.", "experts.17.", "mlp.gate.", "shared_experts", "down_proj.weight_scale"]
DEEP_TEXT = """(() => { const out = []; const walk = (n) => {
  if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.childNodes) { if (c.nodeType === 3) out.push(c.textContent); else walk(c); }
}; walk(document.body); return out.join(' ').replace(/\\s+/g, ' '); })()"""


def server_env(code: Path = REPO) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    if env.pop("PYTHONDONTWRITEBYTECODE", None):
        env["PYTHONPYCACHEPREFIX"] = str(BENCH / ".data" / "pycache")
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_child(code: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.perf_counter() - t0


def wait_text(page: Any, predicate: str, arg: Any = None, timeout: float = 600_000) -> None:
    page.wait_for_function(
        f"(arg) => {{ const t = {DEEP_TEXT}; return {predicate}; }}", arg=arg, timeout=timeout
    )


def since(t0: float) -> float:
    return round(time.perf_counter() - t0, 3)


def expected_counts(folder: Path) -> dict[str, int]:
    from ckpt_explorer.api import open_checkpoint
    from ckpt_explorer.ui.tables import filter_weights, weight_map

    weights = weight_map(open_checkpoint(folder))
    counts = {f: len(filter_weights(weights, f)) for f in FILTERS}
    counts[LAYER] = len(filter_weights(weights, LAYER, prefix=True))
    return counts


def session(
    browser: Any, folder: Path, counts: dict[str, int], total: int, code: Path = REPO
) -> dict[str, Any]:
    """One fresh server (of the checkout ``code``) and one page: the figures of the module
    docstring (for another checkout, those its page has: no module tree, no sample first)."""
    port = free_port()
    cmd = [sys.executable, "-m", "ckpt_explorer", "serve", str(folder), "--port", str(port)]
    ours = code == REPO
    t0 = time.perf_counter()
    proc = subprocess.Popen(  # run in the checkout: ``-m`` imports from the working folder
        cmd, cwd=code, env=server_env(code), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    out: dict[str, Any] = {}
    page = None
    try:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"serve exited with {proc.returncode}") from None
                time.sleep(0.05)
        out["listening_s"] = since(t0)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.set_default_timeout(300_000)
        t_page = time.perf_counter()
        page.goto(f"http://127.0.0.1:{port}/", wait_until="commit")
        out["page_served_s"] = since(t0)
        out["server_cpu_at_page_s"] = round(cpu_seconds(proc.pid), 2)
        page.locator("text=Why this is").first.wait_for()
        out["overview_s"] = since(t_page)
        out["server_cpu_at_overview_s"] = round(cpu_seconds(proc.pid), 2)
        nav = page.evaluate(
            "() => { const n = performance.getEntriesByType('navigation')[0];"
            " return [n.responseEnd, n.domContentLoadedEventEnd, n.loadEventEnd]; }"
        )
        out["html_dom_load_s"] = [round(x / 1000, 3) for x in nav]
        c1 = cpu_seconds(proc.pid)
        page.locator(".bk-tab", has_text="Weight map").first.click()
        page.locator(".weight-map .tabulator-cell[tabulator-field='name']").first.wait_for()
        wait_text(page, "t.includes(arg)", f"of {total:,} tensors")
        if ours:
            page.locator(".modules .mt-row").first.wait_for()
        out["weight_map_s"] = since(t_page)
        out["weight_map_cpu_s"] = round(cpu_seconds(proc.pid) - c1, 2)
        box = page.get_by_placeholder("e.g. layers.3.")
        out["filter_s"], out["filter_cpu_s"] = [], []
        for f in FILTERS:
            t1, c1 = time.perf_counter(), cpu_seconds(proc.pid)
            box.fill(f)
            wait_text(page, "t.includes(arg)", f"{counts[f]:,} of {total:,} tensors")
            out["filter_s"].append(since(t1))
            out["filter_cpu_s"].append(round(cpu_seconds(proc.pid) - c1, 3))
        out["page_s"], out["page_cpu_s"] = [], []
        for n in (2, 3, 4):
            t1, c1 = time.perf_counter(), cpu_seconds(proc.pid)
            page.locator(".weight-map .tabulator-page[data-page='next']").first.click()
            wait_text(page, "t.includes(arg)", f"page {n} of ")
            out["page_s"].append(since(t1))
            out["page_cpu_s"].append(round(cpu_seconds(proc.pid) - c1, 3))
        page.get_by_role("button", name="Clear filters").click()
        wait_text(page, "t.includes(arg)", f"{total:,} of {total:,} tensors")
        if ours:  # another checkout's page: no module tree, its detail driven otherwise
            tree(page, out, counts, total)
            page.get_by_placeholder("e.g. layers.3.").fill(
                "model.layers.10.mlp.experts.17.down_proj"
            )
            cell = page.locator(".weight-map .tabulator-cell", has_text="down_proj.weight").first
            cell.wait_for()
            t1, c1 = time.perf_counter(), cpu_seconds(proc.pid)
            cell.click()
            page.locator("text=2-D slice").first.wait_for()
            out["first_detail_s"] = since(t1)
            out["first_detail_cpu_s"] = round(cpu_seconds(proc.pid) - c1, 2)
            page.get_by_placeholder("e.g. layers.3.").fill("lm_head")
            cell = page.locator(".weight-map .tabulator-cell", has_text="lm_head.weight").first
            cell.wait_for()
            t1 = time.perf_counter()
            cell.click()
            wait_text(page, "t.includes('lm_head.weight') && t.includes('2-D slice')")
            out["lm_head_first_s"] = since(t1)
            wait_text(page, "!t.includes('Figures from a sample')")
            out["lm_head_exact_s"] = since(t1)
        out["server_cpu_s"] = round(cpu_seconds(proc.pid), 2)
        page.close()
    except Exception:
        if page is not None:  # where it stopped, for whoever reads the error
            page.screenshot(path=str(BENCH / ".data" / "bench-dashboard-failed.png"))
        raise
    finally:
        proc.terminate()
        proc.wait()
    return out


def tree(page: Any, out: dict[str, Any], counts: dict[str, int], total: int) -> None:
    """The module tree's figures (see the module docstring)."""
    rows = ".modules .mt-row"
    t1 = time.perf_counter()
    page.locator(f"{rows}[data-id='model.layers.'] .mt-caret").click()
    page.locator(f"{rows}[data-id='model.layers.60.']").wait_for()
    opened = [since(t1)]
    t1 = time.perf_counter()
    page.locator(f"{rows}[data-id='model.layers.10.'] .mt-label").click()
    wait_text(page, "t.includes(arg)", f"{counts[LAYER]:,} of {total:,} tensors")
    out["tree_filter_s"] = since(t1)
    page.locator(f"{rows}[data-id='model.layers.10.mlp.'] .mt-caret").click()
    t1 = time.perf_counter()
    page.locator(f"{rows}[data-id='model.layers.10.mlp.experts.'] .mt-caret").click()
    page.locator(f"{rows}[data-id='model.layers.10.mlp.experts.255.']").wait_for()
    opened.append(since(t1))
    out["tree_open_s"] = opened
    out["tree_rows_drawn"] = page.locator(rows).count()


def median(values: list[Any]) -> Any:
    if isinstance(values[0], list):
        return [round(statistics.median(col), 3) for col in zip(*values, strict=True)]
    return round(statistics.median(values), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=61)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json-out", type=Path)
    ap.add_argument(
        "--against", type=Path, help="another checkout, served in the same run (A B A B ...)"
    )
    args = ap.parse_args()
    from bench_frontier import make_folders
    from playwright.sync_api import sync_playwright

    (folder, total), *_ = make_folders([args.layers]).values()
    env = server_env()
    timed_child("import ckpt_explorer.ui.layout, panel, plotly, pandas, torch", env)  # caches
    floors = {
        "import_panel_s": round(timed_child("import panel", env), 3),
        "open_checkpoint_s": round(
            timed_child(
                f"from ckpt_explorer.api import open_checkpoint; open_checkpoint({str(folder)!r})",
                env,
            ),
            3,
        ),
    }
    counts = expected_counts(folder)
    runs: list[dict[str, Any]] = []
    other: list[dict[str, Any]] = []
    load0 = os.getloadavg()[0]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for i in range(args.repeats):
            if args.against is not None:
                timed_child("import ckpt_explorer.ui.layout", server_env(args.against))
                other.append(session(browser, folder, counts, total, args.against.resolve()))
                print(f"against, repeat {i + 1}: {json.dumps(other[-1])}", flush=True)
            runs.append(session(browser, folder, counts, total))
            print(f"repeat {i + 1}: {json.dumps(runs[-1])}", flush=True)
        browser.close()
    summary = {
        "folder": str(folder),
        "tensors": total,
        "repeats": args.repeats,
        "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "cores": os.cpu_count(),
        **floors,
        "median": {k: median([r[k] for r in runs]) for k in runs[0]},
        **({"against": str(args.against)} if other else {}),
        **(
            {"median_against": {k: median([r[k] for r in other]) for k in other[0]}}
            if other
            else {}
        ),
        "filters": FILTERS,
        "counts": counts,
    }
    print(json.dumps(summary, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps({"summary": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
