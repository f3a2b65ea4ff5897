"""ckpt_explorer's gate beside picklescan, modelscan, fickling and modelaudit on the composed
corpus (tests/hostile/compose.py), per class of payload, container, location and consumer.

    PYTHONPATH=. .venv/bin/python bench/gate_compare.py --out /tmp/x [--tools-bin DIR]

The corpus and the truth (which case's consumer runs code, proven by the oracle) come from
tests/hostile/compose_oracle.py (cached by source hash in the fixture cache). Each tool runs as
its own command line on what ``scan`` is run on (the file, or the case's folder). A tool
*catches* a case when it reports an issue (exit 1; fickling ``--check-safety``, which reads
one file, on any file of a folder); other non-zero exits are errors (fickling: not a pickle;
modelscan: no supported file), counted apart. ckpt_explorer catches a case when ``scan`` exits 1 and the file to
blame is neither ``safe`` nor ``data``. The tools are looked up in ``--tools-bin`` (default:
the folder of this Python, then ``PATH``); one not found is reported as not installed.
Writes ``--out``/compare.json (every case, every tool's exit code) and compare.md, and prints
the markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "tests" / "hostile"))

import compose_oracle  # noqa: E402

TOOLS = {
    "picklescan": lambda p: [["picklescan", "-p", str(p)]],
    "modelscan": lambda p: [["modelscan", "-p", str(p)]],
    "fickling": lambda p: [["fickling", "--check-safety", str(f)] for f in _files(p)],
    "modelaudit": lambda p: [["modelaudit", "scan", "--no-cache", "-q", str(p)]],
}
ISSUE_EXIT = 1  # every tool's "issues found"; 2 and up: an error (fickling: not a pickle)


def _files(p: Path) -> list[Path]:
    return sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]


def _find(tool: str, bin_dir: Path | None) -> str | None:
    for d in [bin_dir, Path(sys.executable).parent]:
        if d is not None and (d / tool).is_file():
            return str(d / tool)
    return shutil.which(tool)


def _version(exe: str, tool: str) -> str:
    py = Path(exe).parent / "python"
    name = {"modelaudit": "modelaudit", "picklescan": "picklescan"}.get(tool, tool)
    code = f"import importlib.metadata as m; print(m.version({name!r}))"
    try:
        out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=60)
        return out.stdout.strip() or "?"
    except OSError:
        return "?"


def run_tool(tool: str, exe: str, target: Path, home: Path) -> tuple[str, list[int]]:
    """(caught | pass | error, exit codes) of one tool on one case's target."""
    codes = []
    env = {**os.environ, "HOME": str(home), "NO_COLOR": "1"}
    env.pop("PYTHONPATH", None)
    for argv in TOOLS[tool](target):
        try:
            proc = subprocess.run(
                [exe, *argv[1:]],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                cwd=str(home),
                timeout=300,
                check=False,
            )
            codes.append(proc.returncode)
        except subprocess.TimeoutExpired:
            codes.append(-9)
    if ISSUE_EXIT in codes:
        return "caught", codes
    return ("pass" if all(c == 0 for c in codes) else "error"), codes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tools-bin", type=Path, default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tools", default=",".join(TOOLS))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    home = args.out / "home"
    home.mkdir(exist_ok=True)

    t0 = time.perf_counter()
    root, cases, truth = compose_oracle.corpus(workers=args.workers)
    print(f"corpus: {len(cases)} cases ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    mal = [n for n, c in cases.items() if c.malicious and compose_oracle.in_property(c, truth[n])]
    ben = [n for n, c in cases.items() if not c.malicious and compose_oracle.in_property(c, truth[n])]  # fmt: skip

    ours = {n: compose_oracle.gate_outcome(root, cases[n]) for n in mal + ben}
    columns: dict[str, dict[str, bool]] = {"ckpt_explorer": {n: ours[n].ok for n in mal}}
    benign: dict[str, dict[str, bool]] = {"ckpt_explorer": {n: not ours[n].ok for n in ben}}
    errors: dict[str, int] = {"ckpt_explorer": 0}
    benign_errors: dict[str, int] = {"ckpt_explorer": 0}
    record: dict[str, dict[str, object]] = {
        n: {"axes": cases[n].axes, "malicious": cases[n].malicious,
            "ckpt_explorer": {"ok": ours[n].ok, "why": ours[n].why, "exit": ours[n].exit_code}}
        for n in mal + ben
    }  # fmt: skip
    versions = {}
    for tool in [t for t in args.tools.split(",") if t]:
        exe = _find(tool, args.tools_bin)
        if exe is None:
            print(f"{tool}: not installed", file=sys.stderr)
            versions[tool] = "not installed"
            continue
        versions[tool] = _version(exe, tool)
        t1 = time.perf_counter()
        names = mal + ben
        with ThreadPoolExecutor(args.workers) as ex:
            got = list(ex.map(lambda n, t=tool, e=exe: run_tool(t, e, root / cases[n].scan, home),
                              names))  # fmt: skip
        res = dict(zip(names, got, strict=True))
        columns[tool] = {n: res[n][0] == "caught" for n in mal}
        benign[tool] = {n: res[n][0] != "pass" for n in ben}
        errors[tool] = sum(res[n][0] == "error" for n in mal)
        benign_errors[tool] = sum(res[n][0] == "error" for n in ben)
        for n in names:
            record[n][tool] = {"result": res[n][0], "exits": res[n][1]}
        print(f"{tool} {versions[tool]}: {time.perf_counter() - t1:.0f} s", file=sys.stderr)

    table = compose_oracle.markdown(cases, columns, benign)
    err = " | ".join(str(errors[t]) for t in columns)
    table += f"\n| **errors** | code-running cases the tool errored on | {err} |"
    err = " | ".join(str(benign_errors[t]) for t in columns)
    table += f"\n| **errors** | benign twins the tool errored on (counted as flagged) | {err} |"
    head = "tools: " + ", ".join(f"{t} {v}" for t, v in versions.items())
    text = f"{head}\n\n{table}\n"
    (args.out / "compare.md").write_text(text)
    (args.out / "compare.json").write_text(
        json.dumps({"versions": versions, "cases": record}, indent=1)
    )
    print(text)


if __name__ == "__main__":
    main()
