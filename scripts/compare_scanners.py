"""Side by side: ckpt-explorer's security rules against picklescan, modelscan, fickling, modelaudit.

    uv venv /tmp/scanners
    uv pip install -p /tmp/scanners/bin/python picklescan modelscan fickling modelaudit
    .venv/bin/python scripts/compare_scanners.py --scanners /tmp/scanners [--benign DIR ...]
    .venv/bin/python scripts/compare_scanners.py --corpus gate [--benign DIR ...]

The scanners live in their own environment (never dependencies of ckpt_explorer) and run as
child processes. The corpus is tests/hostile/make_security_corpus.py (malicious, refused,
benign) or, with ``--corpus gate``, the gate's attack corpus tests/hostile/attack_corpus.py
(malicious cases each proven by the oracle to run under a real loader, and benign real
outputs), written to a temporary folder; ``--benign`` adds real checkpoints (files or folders,
e.g. the fixture makers' outputs under .fixture-cache/), one case each. Prints a markdown table;
for the gate corpus ckpt-explorer's ``scan`` is counted twice: verdict ``unsafe`` only, and
``unsafe`` or ``unverified`` (what the fail-closed gate refuses).

Decisions per tool: picklescan exit 1 (dangerous globals); modelscan exit 1 (issues);
fickling ``check_safety`` at LIKELY_OVERTLY_MALICIOUS or worse on any pickle of the file (every
``.pkl`` zip member, every stacked pickle), and, for benign files, any finding at all;
modelaudit any issue of severity ``critical``; torch ``torch.load(weights_only=True)`` failing
with "Weights only load failed";
ckpt-explorer ``security.code_execution`` (malicious, benign) or
``security.weights_only_refused`` (refused).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

FICKLING = r"""
import io, json, sys, zipfile
from fickling.analysis import Severity, check_safety
from fickling.fickle import Pickled, StackedPickle

def pickles(path):
    data = open(path, "rb").read()
    if data[:4] == b"PK\x03\x04":
        with zipfile.ZipFile(path) as z:
            return [z.read(n) for n in z.namelist() if n.endswith(".pkl")]
    return [p.dumps() for p in StackedPickle.load(io.BytesIO(data), fail_on_decode_error=False)]

out = {}
for case, files in json.load(sys.stdin).items():
    worst = None
    for f in files:
        try:
            for blob in pickles(f):
                sev = check_safety(Pickled.load(blob)).severity
                worst = sev if worst is None or sev > worst else worst
        except Exception:
            pass
    out[case] = [bool(worst and worst >= Severity.LIKELY_OVERTLY_MALICIOUS),
                 bool(worst and worst > Severity.LIKELY_SAFE)]
print(json.dumps(out))
"""

TORCH_LOAD = r"""
import json, sys, warnings, torch
warnings.simplefilter("ignore")
out = {}
for case, files in json.load(sys.stdin).items():
    out[case] = False
    for f in files:
        try:
            torch.load(f, weights_only=True)
        except Exception as e:  # only the weights_only refusal, not e.g. a .distcp read whole
            out[case] = out[case] or "Weights only load failed" in str(e)
print(json.dumps(out))
"""


def _files(path: Path) -> list[str]:
    found = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return [str(p) for p in found]


def _run(argv: list[str], stdin: str = "", timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )


def _batch(argv: list[str], cases: dict[str, Path], torch_only: bool = False) -> dict[str, Any]:
    files = {
        name: [f for f in _files(p) if not torch_only or _torch_file(Path(f))]
        for name, p in cases.items()
    }
    return dict(json.loads(_run(argv, json.dumps(files)).stdout.strip().splitlines()[-1]))


def _torch_file(path: Path) -> bool:
    """A file torch.load would be pointed at: a zip, or a file named like a checkpoint."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head == b"PK\x03\x04" or path.suffix in TORCH_SUFFIXES


TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")


def _modelaudit(bin_: Path, cases: dict[str, Path]) -> dict[str, bool]:
    """One modelaudit run over every case; an issue belongs to the case its location is in."""
    proc = _run([str(bin_ / "modelaudit"), "scan", *map(str, cases.values()), "--format", "json"])
    try:
        issues = json.loads(proc.stdout).get("issues", [])
    except ValueError:
        issues = []
    flagged = dict.fromkeys(cases, False)
    by_len = sorted(cases.items(), key=lambda kv: -len(str(kv[1])))
    for issue in issues:
        where = str(issue.get("location") or "")
        for name, path in by_len:
            if where.startswith(str(path)) and issue.get("severity") == "critical":
                flagged[name] = True
                break
    return flagged


def _scan_words(path: Path) -> set[str]:
    """The verdict words ``ckpt-explorer scan`` gives the files of one case."""
    from ckpt_explorer.security import scan_paths

    try:
        return {str(v.verdict) for v in scan_paths([path]).verdicts}
    except Exception as e:  # the scanner failing on a case is not a verdict of safe
        return {f"error: {type(e).__name__}"}


def verdicts(
    cases: dict[str, Path], scanners: Path, gate: bool = False
) -> dict[str, dict[str, bool]]:
    """tool -> case -> flagged."""
    from ckpt_explorer.security import security_findings

    bin_ = scanners / "bin"
    out: dict[str, dict[str, bool]] = {}
    for name, path in cases.items():
        rc = _run([str(bin_ / "picklescan"), "-p", str(path)]).returncode
        out.setdefault("picklescan", {})[name] = rc == 1
        rc = _run([str(bin_ / "picklescan"), "--strict", "-p", str(path)]).returncode
        out.setdefault("picklescan --strict", {})[name] = rc == 1
        rc = _run([str(bin_ / "modelscan"), "-p", str(path)]).returncode
        out.setdefault("modelscan", {})[name] = rc == 1
        if gate:
            words = _scan_words(path)
            out.setdefault("ckpt-explorer scan: unsafe", {})[name] = "unsafe" in words
            out.setdefault("ckpt-explorer scan: unsafe or unverified", {})[name] = bool(
                words & {"unsafe", "unverified"}
            )
            continue
        findings = {f.rule for f in security_findings(path)}
        out.setdefault("ckpt-explorer: code_execution", {})[name] = (
            "security.code_execution" in findings
        )
        out.setdefault("ckpt-explorer: weights_only_refused", {})[name] = (
            "security.weights_only_refused" in findings
        )
    fick = _batch([str(bin_ / "python"), "-c", FICKLING], cases)
    out["fickling (likely overtly malicious+)"] = {k: v[0] for k, v in fick.items()}
    out["fickling (any finding)"] = {k: v[1] for k, v in fick.items()}
    out["modelaudit (critical)"] = _modelaudit(bin_, cases)
    out["torch.load(weights_only=True) refuses"] = _batch(
        [sys.executable, "-c", TORCH_LOAD], cases, torch_only=True
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scanners", type=Path, default=Path("/tmp/scanners"))
    ap.add_argument("--benign", type=Path, nargs="*", default=[])
    ap.add_argument("--details", action="store_true", help="print each case's flags to stderr")
    ap.add_argument("--corpus", choices=("security", "gate"), default="security")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "hostile"))
    if args.corpus == "gate":
        from attack_corpus import make
    else:
        from make_security_corpus import make

    root = Path(tempfile.mkdtemp(prefix="seccorpus-"))
    classes: dict[str, str] = {}
    paths: dict[str, Path] = {}
    for name, c in make(root).items():
        classes[name], paths[name] = c["class"], root / c["path"]
    for path in args.benign:
        classes[str(path)], paths[str(path)] = "benign", path
    table = verdicts(paths, args.scanners, gate=args.corpus == "gate")
    assert not (root / "PWNED").exists(), "a payload ran"
    assert not list(root.rglob("PWNED-*")), "a payload ran"
    klasses = (
        ("malicious", "benign") if args.corpus == "gate" else ("malicious", "refused", "benign")
    )
    if args.corpus == "gate":
        print("| tool | malicious caught | benign flagged |")
        print("|---|---|---|")
    else:
        print("| tool | malicious caught | harmless-but-refused flagged | benign flagged |")
        print("|---|---|---|---|")
    for tool, flagged in table.items():
        cells = []
        for klass in klasses:
            names = [n for n in paths if classes[n] == klass]
            cells.append(f"{sum(bool(flagged.get(n)) for n in names)}/{len(names)}")
        print(f"| {tool} | {' | '.join(cells)} |")
    if args.details:
        for name in paths:
            hits = [t for t, f in table.items() if f.get(name)]
            print(f"{classes[name]:9} {name}: {', '.join(hits)}", file=sys.stderr)


if __name__ == "__main__":
    main()
