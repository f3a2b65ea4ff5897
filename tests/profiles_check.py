"""Scores validate on the writer-profile corpus (tests/fixture_makers/realworld_profiles_maker.py):
clean states with a false error or warning, planted faults found.

Run as a script to print the figure for the code on ``PYTHONPATH`` (before/after a change):
``python tests/profiles_check.py CORPUS_DIR``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ckpt_explorer import validate_checkpoint

# rules whose warning/error reports each planted fault
FOUND_BY: dict[str, frozenset[str]] = {
    "scheduler_not_restored": frozenset(
        {
            "bundle.missing_scheduler",
            "bundle.scheduler_step",
            "bundle.step_mismatch",
            "bundle.optimizer_step",
            "scheduler.optimizer_step",
            "scheduler.step_count",
            "scheduler.last_lr",
        }
    ),
    "optimizer_moments_reset": frozenset(
        {
            "bundle.optimizer_step",
            "bundle.step_mismatch",
            "optimizer.step_mismatch",
            "scheduler.optimizer_step",
        }
    ),
    "stale_pointer": frozenset({"bundle.stale_pointer"}),
    "stale_copy": frozenset({"bundle.stale_copy"}),
}
LOUD = ("error", "warning")


def score(root: Path, case: dict[str, Any]) -> dict[str, Any]:
    """One case: its loud findings (security and loader findings left out) and the verdict."""
    report = validate_checkpoint(root / case["path"], numeric=True)
    loud = [
        (f.rule, f.severity, f.message)
        for f in report.findings
        if f.severity in LOUD and not f.rule.startswith(("security.", "loadable."))
    ]
    out: dict[str, Any] = {"loud": loud}
    if case["expect"] == "clean":
        out["false"] = bool(loud)
    else:
        rules = FOUND_BY[case["expect"]].union(*(FOUND_BY[a] for a in case.get("also", ())))
        out["found"] = any(r in rules for r, _, _ in loud)
    return out


def figure(root: Path) -> dict[str, Any]:
    manifest = json.loads((root / "manifest.json").read_text())
    rows = {cid: score(root, c) for cid, c in sorted(manifest["cases"].items())}
    clean = [cid for cid, c in manifest["cases"].items() if c["expect"] == "clean"]
    faults = [cid for cid in rows if cid not in clean]
    return {
        "clean": len(clean),
        "clean_with_false_findings": sorted(cid for cid in clean if rows[cid]["false"]),
        "faults": len(faults),
        "faults_found": sorted(cid for cid in faults if rows[cid]["found"]),
        "rows": rows,
    }


if __name__ == "__main__":
    result = figure(Path(sys.argv[1]))
    for cid, row in result["rows"].items():
        print(cid, {k: v for k, v in row.items() if k != "loud"})
        for rule, severity, message in row["loud"]:
            print(f"    {severity:7} {rule}: {message[:160]}")
    print(
        f"clean with false warnings/errors: {len(result['clean_with_false_findings'])}/"
        f"{result['clean']}; faults found: {len(result['faults_found'])}/{result['faults']}"
    )
