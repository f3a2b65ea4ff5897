"""The composed corpus with the truth about each case: which consumer runs code.

``corpus()`` builds ``compose.make`` and runs every case under its own consumer with the
oracle (``tests/security_oracle.py``: a forked child under an audit hook, or a fresh process
for the folder consumers); the result is cached by the hash of the sources that decide it
(``compose.source_key``), in ``$CKPT_FIXTURE_CACHE`` as the test fixtures are. ``gate_outcome``
holds ``scan`` to the property: a case whose consumer runs code must exit 1 with no ``safe`` or
``data`` verdict on the file to blame; a benign twin that its consumer loads must be ``safe`` or
``data`` with exit 0. ``figures`` counts the outcomes per value of each axis.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

import compose

AXES = ("payload", "container", "location", "consumer")
PASSING = ("safe", "data")
CACHE = Path(
    os.environ.get("CKPT_FIXTURE_CACHE", Path(__file__).parent.parent.parent / ".fixture-cache")
)


@dataclass
class Truth:
    """What the case's consumer did: ``ran`` when code ran (a payload's marker, or an audited
    code event); ``status`` of the load (ok | error | timeout | crash)."""

    ran: bool
    status: str
    error: str
    evidence: list[str]


def _oracle(root: Path, cases: dict[str, compose.Case], workers: int) -> dict[str, Truth]:
    from security_oracle import Oracle

    names = list(cases)
    jobs = [
        (root / cases[n].load, [cases[n].consumer], {"root": str(root / cases[n].root),
                                                      "arg": cases[n].arg})
        for n in names
    ]  # fmt: skip
    with Oracle(workers=workers, timeout=240) as oracle:
        results = oracle.run_jobs(jobs)
    out = {}
    for n, r in zip(names, results, strict=True):
        lr = r.loaders[cases[n].consumer]
        code = [x for x in lr.non_inert if not x.startswith("global ")]
        out[n] = Truth(bool(lr.markers or code), lr.status, lr.error, lr.non_inert[:4])
    return out


def corpus(workers: int = 2) -> tuple[Path, dict[str, compose.Case], dict[str, Truth]]:
    """(root, cases, truth): built and run once per source hash, then read from the cache."""
    folder = CACHE / f"compose-{compose.source_key()}"
    done = folder / "oracle.json"
    if not done.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="compose-", dir=CACHE))
        try:
            cases = compose.make(tmp / "corpus")
            truth = _oracle(tmp / "corpus", cases, workers)
            (tmp / "oracle.json").write_text(
                json.dumps({k: v.__dict__ for k, v in truth.items()}, indent=1)
            )
            if not done.is_file():
                shutil.rmtree(folder, ignore_errors=True)
                os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    root = folder / "corpus"
    truth = {k: Truth(**v) for k, v in json.loads(done.read_text()).items()}
    return root, compose.load_manifest(root), truth


def _verdicts_for(report: Any, target: Path) -> list[Any]:
    """Verdicts that speak for ``target``: its own, or one on a folder holding it."""
    want = os.path.realpath(target)
    out = []
    for v in report.verdicts:
        mine = os.path.realpath(str(v.path))
        if mine == want or want.startswith(mine.rstrip(os.sep) + os.sep):
            out.append(v)
    return out


@dataclass
class Outcome:
    """How ``scan`` did on one case: ``ok`` when the property held; ``why`` when not."""

    ok: bool
    why: str
    exit_code: int
    blame_verdicts: list[str]


def gate_outcome(root: Path, case: compose.Case) -> Outcome:
    """Hold ``scan`` of the case's target to the property (see the module docstring)."""
    from ckpt_explorer.security import scan_paths

    try:
        report = scan_paths([root / case.scan])
    except Exception as e:  # no verdict is never a pass
        return Outcome(False, f"scan raised {type(e).__name__}: {e}", -1, [])
    words = sorted({v.verdict for v in _verdicts_for(report, root / case.blame)})
    code = report.exit_code
    if case.malicious:
        why = []
        if code != 1:
            why.append(f"exit {code}")
        if set(words) & set(PASSING):
            why.append(f"{Path(case.blame).name} is {'/'.join(words)}")
        return Outcome(not why, ", ".join(why), code, words)
    bad = sorted({f"{Path(str(v.path)).name}={v.verdict}" for v in report.verdicts
                  if v.verdict not in PASSING})  # fmt: skip
    why = ([f"exit {code}"] if code != 0 else []) + bad
    return Outcome(not why, "false alarm: " + ", ".join(why) if why else "", code, words)


def in_property(case: compose.Case, truth: Truth) -> bool:
    """Cases the property speaks for: code-running malicious ones, benign ones that load."""
    if case.malicious:
        return truth.ran
    return truth.status == "ok" and not truth.evidence


def figures(
    cases: dict[str, compose.Case],
    caught: dict[str, bool],
    axes: Iterable[str] = AXES,
) -> dict[str, dict[str, tuple[int, int]]]:
    """axis -> value -> (caught, total) over the cases in ``caught`` (malicious only)."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for axis in axes:
        per: dict[str, tuple[int, int]] = {}
        for name, ok in caught.items():
            value = cases[name].axes[axis]
            c, t = per.get(value, (0, 0))
            per[value] = (c + ok, t + 1)
        out[axis] = dict(sorted(per.items()))
    return out


def markdown(
    cases: dict[str, compose.Case],
    columns: dict[str, dict[str, bool]],
    benign: dict[str, dict[str, bool]] | None = None,
    fmt: Callable[[int, int], str] = lambda c, t: f"{c}/{t}",
) -> str:
    """A table: one row per axis value, one column per tool: caught / code-running cases;
    with ``benign`` (tool -> case -> flagged) a last row of false alarms on benign twins."""
    tools = list(columns)
    per = {tool: figures(cases, caught) for tool, caught in columns.items()}
    lines = ["| class | value | " + " | ".join(tools) + " |",
             "|---|---|" + "---|" * len(tools)]  # fmt: skip
    first = next(iter(per.values()))
    for axis in AXES:
        for value in first[axis]:
            cells = [fmt(*per[t][axis].get(value, (0, 0))) for t in tools]
            lines.append(f"| {axis} | {value} | " + " | ".join(cells) + " |")
    totals = [fmt(sum(columns[t].values()), len(columns[t])) for t in tools]
    lines.append("| **all** | code-running cases caught | " + " | ".join(totals) + " |")
    if benign:
        cells = [fmt(sum(benign[t].values()), len(benign[t])) if t in benign else "" for t in tools]
        lines.append("| **benign** | twins flagged (false alarms) | " + " | ".join(cells) + " |")
    return "\n".join(lines)
