"""The gate against the composing generator: no file whose consumer runs code passes.

``tests/hostile/compose.py`` composes payload x container x location x consumer;
``tests/hostile/compose_oracle.py`` runs each case under its own real consumer (the oracle, a
forked child under an audit hook) and caches the answers by source hash. The property, per
case whose consumer ran code: ``scan`` of the case exits 1 and the file to blame is neither
``safe`` nor ``data``. Per benign twin that its consumer loads: nothing but ``safe``/``data``
and exit 0. No case is excused by a list: a failure names every case that broke the property,
why, and the figures per class.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "hostile"))

import compose_oracle

# a cold cache builds the corpus and runs every case under its consumer (minutes on 2 cores)
pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def composed() -> tuple[Path, dict[str, Any], dict[str, compose_oracle.Truth]]:
    return compose_oracle.corpus(workers=2)


def test_generator_composes_every_axis(composed: Any) -> None:
    _root, cases, _truth = composed
    malicious = [c for c in cases.values() if c.malicious]
    assert 100 <= len(malicious) <= 250
    seen = {axis: {c.axes[axis] for c in malicious} for axis in compose_oracle.AXES}
    assert len(seen["payload"]) >= 8 and len(seen["container"]) >= 20, seen
    assert len(seen["location"]) >= 6 and len(seen["consumer"]) >= 9, seen
    assert sum(not c.malicious for c in cases.values()) >= 20


def test_every_malicious_case_runs_under_its_consumer(composed: Any) -> None:
    """The generator's own check: a case whose payload never runs proves nothing."""
    root, cases, truth = composed
    silent = {n: (truth[n].status, truth[n].error[:120])
              for n, c in cases.items() if c.malicious and not truth[n].ran}  # fmt: skip
    assert not silent, silent
    assert not list(root.rglob("PWNED*")), "a payload wrote into the corpus itself"


def test_benign_twins_load_and_reach_nothing(composed: Any) -> None:
    _root, cases, truth = composed
    bad = {n: (truth[n].status, truth[n].error[:120], truth[n].evidence)
           for n, c in cases.items() if not c.malicious and not compose_oracle.in_property(c, truth[n])}  # fmt: skip
    assert not bad, bad


def test_no_code_running_file_passes_the_gate(composed: Any) -> None:
    root, cases, truth = composed
    caught: dict[str, bool] = {}
    missed: list[str] = []
    for name, case in cases.items():
        if not case.malicious or not compose_oracle.in_property(case, truth[name]):
            continue
        out = compose_oracle.gate_outcome(root, case)
        caught[name] = out.ok
        if not out.ok:
            missed.append(f"{name}: {out.why}")
    table = compose_oracle.markdown(cases, {"ckpt_explorer scan": caught})
    print(table)
    assert not missed, (
        f"{len(missed)} of {len(caught)} code-running cases pass the gate:\n"
        + "\n".join(missed)
        + "\n\n"
        + table
    )


def test_no_false_alarm_on_benign_twins(composed: Any) -> None:
    root, cases, truth = composed
    alarms = [
        f"{name}: {out.why}"
        for name, case in cases.items()
        if not case.malicious and compose_oracle.in_property(case, truth[name])
        for out in [compose_oracle.gate_outcome(root, case)]
        if not out.ok
    ]
    assert not alarms, "\n".join(alarms)
