"""The fail-closed gate against its oracle: real loaders decide what a file does.

The oracle (tests/security_oracle.py) loads every corpus file with the real loaders in a
forked child under an audit hook. The rule the scanner must keep: a file whose load by a real
loader reaches a non-inert global (or runs code otherwise) gets ``unsafe`` or ``unverified``;
``safe`` is allowed only where no loader reached anything; benign real outputs get ``safe`` or
``data``. (a) the oracle proves every malicious case runs its marker and no benign case
reaches anything; (b) the scanner against the oracle on the corpus; (c) generated files
(tests/hostile/pickle_mutations.py) through both; (d) the oracle's own controls.
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "hostile"))

import attack_corpus
import pickle_mutations
from security_oracle import Oracle, OracleResult, files_of

GENERATED = 150  # files in the fixed-seed generated run (about a minute on two cores)
FAIL_CLOSED = ("unsafe", "unverified")


@pytest.fixture(scope="session")
def gate_corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("gate-corpus")
    return root, attack_corpus.make(root)


@pytest.fixture(scope="session")
def oracle() -> Iterator[Oracle]:
    with Oracle(workers=2, timeout=90) as o:
        yield o


@pytest.fixture(scope="session")
def corpus_oracle(
    gate_corpus: tuple[Path, dict[str, Any]], oracle: Oracle
) -> dict[str, list[OracleResult]]:
    """case -> the oracle's result for each file (and DCP folder) of the case."""
    root, cases = gate_corpus
    files = {name: files_of(root / c["path"]) for name, c in cases.items()}
    results = oracle.run([f for fs in files.values() for f in fs])
    return {name: [results[f] for f in fs] for name, fs in files.items()}


# ------------------------------------------------------------------------------ (a)


def test_corpus_covers_the_classes(gate_corpus: tuple[Path, dict[str, Any]]) -> None:
    _root, cases = gate_corpus
    malicious = [c for c in cases.values() if c["class"] == "malicious"]
    assert len(malicious) >= 120 and sum(c["class"] == "benign" for c in cases.values()) >= 15
    sources = {c["source"] for c in malicious}
    assert sum(s.startswith("GHSA-") for s in sources) >= 20, sources


def test_oracle_every_malicious_case_runs_its_marker(
    gate_corpus: tuple[Path, dict[str, Any]], corpus_oracle: dict[str, list[OracleResult]]
) -> None:
    root, cases = gate_corpus
    silent = [
        name
        for name, c in cases.items()
        if c["class"] == "malicious" and not any(r.ran_marker for r in corpus_oracle[name])
    ]
    assert not silent, f"cases whose payload ran under no loader (a bug in the case): {silent}"
    for name, c in cases.items():
        if c["class"] == "malicious":
            ran = {m for r in corpus_oracle[name] for lr in r.loaders.values() for m in lr.markers}
            assert ran <= {f"PWNED-{name}"}, (name, ran)  # each payload marks its own case
    assert not list(root.rglob("PWNED*")), "a payload wrote into the corpus itself"


def test_oracle_no_benign_case_reaches_anything(
    gate_corpus: tuple[Path, dict[str, Any]], corpus_oracle: dict[str, list[OracleResult]]
) -> None:
    _root, cases = gate_corpus
    reached = {
        name: [x for r in corpus_oracle[name] for x in r.non_inert]
        for name, c in cases.items()
        if c["class"] == "benign"
    }
    assert not {k: v for k, v in reached.items() if v}
    loaded = [
        name
        for name, c in cases.items()
        if c["class"] == "benign"
        and not c["path"].endswith((".json", ".txt"))  # no pickle: nothing loads them
        and not any(lr.status == "ok" for r in corpus_oracle[name] for lr in r.loaders.values())
    ]
    assert not loaded, f"benign cases no real loader could open: {loaded}"


# ------------------------------------------------------------------------------ (b), (c)


def _verdicts_for(report: Any, target: Path) -> list[Any]:
    """The scanner's verdicts that speak for ``target``: its own, one on a folder holding it
    (a folder refused whole), and for a DCP folder the verdicts of its files."""
    want = {os.path.abspath(target), os.path.realpath(target)}
    out = []
    for v in report.verdicts:
        p = Path(v.path)
        mine = {os.path.abspath(p), os.path.realpath(p)}
        if mine & want:
            out.append(v)
        elif any(t.startswith(m.rstrip(os.sep) + os.sep) for m in mine for t in want):
            out.append(v)  # a verdict on a folder above the file
        elif target.is_dir() and any(m.startswith(t + os.sep) for m in mine for t in want):
            out.append(v)  # a file of a DCP folder
    return out


def rule_violations(scan_root: Path, results: list[OracleResult], benign: bool) -> list[str]:
    """What the scanner got wrong for the files under ``scan_root`` (empty: rule kept)."""
    from ckpt_explorer.security import scan_paths

    try:
        report = scan_paths([scan_root])
    except Exception as e:  # a scanner that crashes gave no verdict: never a pass
        return [f"{scan_root}: scan_paths raised {type(e).__name__}: {e}"]
    out = []
    for r in results:
        verdicts = _verdicts_for(report, r.path)
        words = sorted({v.verdict for v in verdicts})
        if r.unsafe:
            if not verdicts:
                out.append(f"{r.path}: no verdict, oracle reached {r.non_inert[:3]}")
            elif all(v.verdict not in FAIL_CLOSED for v in verdicts):
                out.append(f"{r.path}: {words}, oracle {r.reached_by} reached {r.non_inert[:3]}")
        elif benign and any(v.verdict not in ("safe", "data") for v in verdicts):
            out.append(f"{r.path}: benign file got {words}")
    if any(r.unsafe for r in results) and report.exit_code == 0:
        out.append(f"{scan_root}: exit code 0 although the oracle reached code")
    if benign and report.exit_code != 0:
        out.append(f"{scan_root}: benign but exit code {report.exit_code}")
    return out


# benign cases whose pickles are inert but which ship code (a trust_remote_code module)
SHIPS_CODE = ("benign_custom_code",)


def test_scanner_keeps_the_rule_on_the_corpus(
    gate_corpus: tuple[Path, dict[str, Any]], corpus_oracle: dict[str, list[OracleResult]]
) -> None:
    from ckpt_explorer.security import scan_paths

    root, cases = gate_corpus
    bad: list[str] = []
    for name, c in cases.items():
        benign = c["class"] == "benign" and name not in SHIPS_CODE
        bad += rule_violations(root / c["path"], corpus_oracle[name], benign)
    assert not bad, f"{len(bad)} violations:\n" + "\n".join(bad)
    for name in SHIPS_CODE:  # inert pickles beside code: code, not unsafe; passes when allowed
        report = scan_paths([root / cases[name]["path"]])
        assert {v.verdict for v in report.verdicts} == {"safe", "code"}, name
        assert scan_paths([root / cases[name]["path"]], allow_code=True).exit_code == 0


@settings(
    max_examples=1,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_generated_files_oracle_vs_scanner(
    data: st.DataObject, oracle: Oracle, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("generated")
    made = [data.draw(pickle_mutations.files(i)) for i in range(GENERATED)]
    paths = [g.write(folder) for g in made]
    results = oracle.run(paths, stop=True)  # each load stops at its first non-inert global
    unsafe = [p for p in paths if results[p].unsafe]
    assert len(unsafe) >= GENERATED // 5, "the generator made too few reachable payloads"
    assert not any(
        results[p].unsafe for p, g in zip(paths, made, strict=True) if not g.malicious_seed
    )
    bad: list[str] = []
    for p in paths:
        bad += rule_violations(p, [results[p]], benign=False)
    assert not bad, f"{len(bad)} of {GENERATED} generated files broke the rule:\n" + "\n".join(
        bad[:40]
    )


# ------------------------------------------------------------------------------ (d)


class _Touch:
    def __init__(self, case: str) -> None:
        self.case = case

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (attack_corpus.cmd(self.case),)


class _Sleep:
    def __reduce__(self) -> tuple[Any, tuple[int]]:
        return __import__("time").sleep, (120,)


def test_oracle_control_marker_really_runs(oracle: Oracle, tmp_path: Path) -> None:
    evil, clean = tmp_path / "evil.pkl", tmp_path / "clean.pkl"
    evil.write_bytes(pickle.dumps(_Touch("evil.pkl"), protocol=2))
    clean.write_bytes(pickle.dumps({"a": [1, 2]}, protocol=2))
    got = oracle.run([evil, clean], loaders=("pickle", "torch_weights_only"))
    assert got[evil].ran_marker == ["pickle"]
    assert got[evil].loaders["pickle"].markers == ["PWNED-evil.pkl"]
    assert "global posix.system" in got[evil].non_inert
    assert got[evil].loaders["torch_weights_only"].non_inert == []  # torch's own refusal
    assert not got[clean].unsafe and got[clean].loaders["pickle"].status == "ok"
    stopped = oracle.run([evil], loaders=("pickle",), stop=True)[evil]
    assert stopped.loaders["pickle"].status == "stopped" and not stopped.ran_marker
    assert stopped.unsafe  # the reach is proven without running the payload
    assert not list(tmp_path.rglob("PWNED*"))


def test_oracle_sees_a_shadowing_package(oracle: Oracle, tmp_path: Path) -> None:
    (tmp_path / "omegaconf").mkdir()
    (tmp_path / "omegaconf" / "__init__.py").write_text("X = 1\n")
    (tmp_path / "omegaconf" / "dictconfig.py").write_text("class DictConfig(dict):\n    pass\n")
    pkl = tmp_path / "cfg.pkl"
    pkl.write_bytes(b"\x80\x02comegaconf.dictconfig\nDictConfig\n)\x81.")
    got = oracle.run([pkl], loaders=("pickle", "pickle_fresh"))[pkl]
    assert got.loaders["pickle"].status == "ok"
    assert any("from the checkpoint folder" in x for x in got.loaders["pickle"].non_inert)
    assert any("from the checkpoint folder" in x for x in got.loaders["pickle_fresh"].non_inert)


def test_oracle_survives_a_hanging_load(oracle: Oracle, tmp_path: Path) -> None:
    slow = tmp_path / "slow.pkl"
    slow.write_bytes(pickle.dumps(_Sleep(), protocol=2))
    got = oracle.run([slow], loaders=("pickle", "pickle_py"), timeout=3)[slow]
    assert [r.status for r in got.loaders.values()] == ["timeout", "timeout"]
