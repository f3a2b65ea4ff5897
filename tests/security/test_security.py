"""security.* rules and ``ckpt-explorer scan`` over the security corpus and real checkpoints.

The corpus (tests/hostile/make_security_corpus.py) holds payloads that would only create a
marker file; nothing here may ever create it. Which files torch's default loader refuses is
asked of torch itself (``torch.load(weights_only=True)``), never assumed.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import torch

from ckpt_explorer.cli import main
from ckpt_explorer.security import (
    CODE,
    REFUSED,
    UNVERIFIED,
    judge_file,
    scan_paths,
    security_findings,
)
from ckpt_explorer.security.judge import SHIPS_CODE
from ckpt_explorer.validate import validate_checkpoint

TOOLS = ("torch", "hf", "dcp", "deepspeed", "colossalai")


@pytest.fixture(scope="module")
def seccorpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    hostile = str(Path(__file__).parent.parent / "hostile")
    sys.path.insert(0, hostile)
    try:
        from make_security_corpus import make
    finally:
        sys.path.remove(hostile)
    root = tmp_path_factory.mktemp("security")
    return root, make(root)


def _rules(root: Path, case: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in security_findings(root / case["path"]):
        out.setdefault(f.rule, []).append(f.message)
    return out


def test_corpus_covers_the_classes(seccorpus: tuple[Path, dict[str, Any]]) -> None:
    _root, cases = seccorpus
    counts = {k: sum(c["class"] == k for c in cases.values()) for k in ("malicious", "refused")}
    assert counts["malicious"] >= 45 and counts["refused"] >= 10, counts


def test_every_payload_is_code_execution_and_nothing_runs(
    seccorpus: tuple[Path, dict[str, Any]],
) -> None:
    root, cases = seccorpus
    problems = []
    for name, case in cases.items():
        rules = _rules(root, case)
        expect_code = case["class"] == "malicious" or "unknown_global" in case
        if expect_code != (CODE in rules):
            problems.append(f"{name} ({case['class']}): {sorted(rules)}")
        if case["class"] == "benign" and rules:
            problems.append(f"{name}: benign file has findings {rules}")
    assert not (root / "PWNED").exists(), "a payload in the corpus was executed"
    assert not problems, "\n".join(problems)


def test_weights_only_verdict_matches_torch(seccorpus: tuple[Path, dict[str, Any]]) -> None:
    """Every torch-loadable file: flagged exactly when torch.load(weights_only=True) refuses."""
    root, cases = seccorpus
    problems = []
    for name, case in cases.items():
        path = root / case["path"]
        if path.is_dir() or path.suffix != ".pt":
            continue
        try:
            torch.load(path, weights_only=True)
            refused = False
        except Exception:  # torch's refusal is an UnpicklingError or RuntimeError
            refused = True
        flagged = REFUSED in _rules(root, case)
        if refused != flagged:
            problems.append(f"{name}: torch refuses={refused}, flagged={flagged}")
    assert not (root / "PWNED").exists()
    assert not problems, "\n".join(problems)


def test_finding_names_file_member_global_offset_and_effect(
    seccorpus: tuple[Path, dict[str, Any]],
) -> None:
    root, _cases = seccorpus
    [code] = [f for f in security_findings(root / "os_system.pt") if f.rule == CODE]
    assert "os_system/data.pkl" in code.message and "names posix.system" in code.message
    assert "GLOBAL at byte " in code.message
    assert "REDUCE at byte" in code.message and "shell command" in code.message
    assert code.file == "os_system.pt" and code.severity == "error"
    dotted = " ".join(f.message for f in security_findings(root / "dotted_print_exec.pt"))
    assert "builtins.print.__self__.exec" in dotted and "runs Python code" in dotted
    legacy = " ".join(f.message for f in security_findings(root / "legacy_keys.pt"))
    assert "storage keys pickle" in legacy
    member = " ".join(f.message for f in security_findings(root / "zip_second_member.pt"))
    assert "extra.pkl" in member
    nested = " ".join(f.message for f in security_findings(root / "embedded_pickle_loads.pt"))
    assert "embedded as bytes" in nested and "pickle.loads" in nested
    [refused] = [f for f in security_findings(root / "argparse_namespace.pt") if f.rule == REFUSED]
    assert "argparse.Namespace" in refused.message and "add_safe_globals" in refused.hint


def test_container_tricks(seccorpus: tuple[Path, dict[str, Any]]) -> None:
    root, _cases = seccorpus
    for name, words in (
        ("zip_duplicate_member.pt", "named twice"),
        ("zip_name_mismatch.pt", "in its local header"),
        ("zip_bad_crc.pt", "does not match its CRC"),
    ):
        messages = [f.message for f in security_findings(root / name) if f.rule == UNVERIFIED]
        assert any(words in m for m in messages), (name, messages)


def test_a_pickle_no_loader_can_read_is_said_as_such(tmp_path: Path) -> None:
    hostile = str(Path(__file__).parent.parent / "hostile")
    sys.path.insert(0, hostile)
    try:
        from make_security_corpus import _clean_pickle, _zip_with_pickle
    finally:
        sys.path.remove(hostile)
    path = tmp_path / "cut.pt"
    _zip_with_pickle(path, _clean_pickle()[:-9])
    verdict = judge_file(path)
    [finding] = verdict.findings
    assert verdict.verdict == "safe"  # what ran before the cut is inert; the load then fails
    assert finding.rule == "security.container" and finding.severity == "info"
    assert "the load stops at byte" in finding.message and "truncated" in finding.message


def test_torchscript_archive_is_code(tmp_path: Path) -> None:
    scripted = torch.jit.script(torch.nn.Linear(2, 2))
    path = tmp_path / "scripted.pt"
    torch.jit.save(scripted, str(path))
    findings = security_findings(path)
    assert any(f.rule == SHIPS_CODE and "TorchScript" in f.message for f in findings)
    assert not any(f.rule == UNVERIFIED for f in findings)
    assert judge_file(path).verdict == "code"


def test_validate_lists_security_findings_first(seccorpus: tuple[Path, dict[str, Any]]) -> None:
    root, _cases = seccorpus
    report = validate_checkpoint(root / "training_state", numeric=False)
    assert not report.ok and "security" in report.checked
    assert report.findings[0].rule.startswith("security.")
    assert any(f.rule == CODE and f.file == "rng_state.pth" for f in report.findings)
    code = main(["validate", str(root / "os_system.pt"), "--no-numeric"])
    assert code == 1
    assert not (root / "PWNED").exists()


@pytest.mark.parametrize("tool", TOOLS)
def test_real_checkpoints_are_never_code_execution(real_checkpoints: Any, tool: str) -> None:
    root, _manifest = real_checkpoints(tool)
    report = scan_paths([root])
    judged = [v for v in report.verdicts if v.verdict == "safe"]
    assert judged, "no pickle found in the fixtures"
    assert {v.verdict for v in report.verdicts} <= {"safe", "data"}, [
        (v.path, v.reasons) for v in report.verdicts if v.verdict not in ("safe", "data")
    ]
    assert report.exit_code == 0
    for v in judged:
        for f in v.findings:  # only DeepSpeed's optimizer records are refused by weights_only
            assert tool == "deepspeed" and f.rule == REFUSED, (v.path, f)
            assert "deepspeed.runtime" in f.message and "optim_states" in str(v.path)
    if tool == "dcp":
        assert any(v.path.name == ".metadata" for v in judged)


@pytest.mark.parametrize("tool", ("realworld_hf", "realworld_torch"))
def test_training_run_outputs_are_never_code_execution(real_checkpoints: Any, tool: str) -> None:
    """HF Trainer's training_args.bin, accelerate and nanoGPT-style states: records the
    allow-list knows (TrainingArguments and its enums), never code execution."""
    root, _manifest = real_checkpoints(tool)
    report = scan_paths([root])
    assert report.verdicts and not [v.path for v in report.verdicts if v.unsafe]


def test_scan_cli_exit_codes_and_json(
    seccorpus: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    root, _cases = seccorpus

    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["scan", *argv])
        return code, out.getvalue(), err.getvalue()

    code, out, _ = run(str(root / "benign_model.pt"), str(root / "benign_legacy.pt"))
    assert code == 0 and out.count("SAFE") == 2
    code, out, _ = run(str(root), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["unsafe"] >= 45
    by_name = {Path(f["path"]).name: f for f in doc["files"]}
    assert by_name["os_system.pt"]["verdict"] == "unsafe"
    assert by_name["benign_optimizer.pt"]["verdict"] == "safe"
    assert by_name["numpy_array.pt"]["verdict"] == "safe"  # refused by torch, yet inert
    refused = [f for f in by_name["numpy_array.pt"]["findings"] if f["rule"] == REFUSED]
    assert refused and refused[0]["severity"] == "error"
    broken = tmp_path / "broken.pt"
    broken.write_bytes((root / "benign_model.pt").read_bytes()[:300])
    code, out, _ = run(str(broken))
    # no reader opens it, and the gate cannot place its bytes: not proven data
    assert code == 1 and "UNVERIFIED" in out and "neither" in out
    code, out, _ = run(str(tmp_path / "missing.pt"))
    assert code == 2 and "UNREADABLE" in out
    assert not (root / "PWNED").exists()


def _resident_bytes(path: Path) -> int:
    """Bytes of ``path`` in the page cache (``mincore`` over a fresh read-only map of it)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    with open(path, "rb") as f:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        try:
            vec = (ctypes.c_ubyte * pages)()
            assert libc.mincore(addr, size, vec) == 0, ctypes.get_errno()
            return sum(v & 1 for v in vec) * mmap.PAGESIZE
        finally:
            libc.munmap(addr, size)


def _drop_cache(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def test_scan_reads_headers_only(tmp_path: Path) -> None:
    """Of a 64 MiB torch zip and a 64 MiB legacy file, scan brings only the pickles, headers
    and directory into the page cache (measured with mincore after dropping the cache), never
    the storages."""
    path = tmp_path / "big.pt"
    torch.save({"w": torch.zeros(16 << 20), "step": 3}, path)  # 64 MiB of storage
    legacy = tmp_path / "big_legacy.pt"
    torch.save({"w": torch.zeros(16 << 20)}, legacy, _use_new_zipfile_serialization=False)
    for p in (path, legacy):
        _drop_cache(p)
        if _resident_bytes(p) > 1 << 20:
            pytest.skip("this filesystem keeps the file cached (posix_fadvise ignored)")
    report = scan_paths([path, legacy])
    assert [v.verdict for v in report.verdicts] == ["safe", "safe"]
    for p in (path, legacy):
        assert _resident_bytes(p) < 2 << 20, (p.name, _resident_bytes(p))  # of 64 MiB


def test_control_a_payload_would_really_run(tmp_path: Path) -> None:
    """The marker method works: loading such a pickle with a free unpickler creates the marker,
    in a child process; the scanner flags the same bytes."""
    marker = tmp_path / "LIVE"
    hostile = str(Path(__file__).parent.parent / "hostile")
    sys.path.insert(0, hostile)
    try:
        from make_security_corpus import _Reduce
    finally:
        sys.path.remove(hostile)
    path = tmp_path / "payload.pkl"
    path.write_bytes(pickle.dumps(_Reduce(os.system, f"touch {marker}"), protocol=2))
    assert judge_file(path).unsafe and not marker.exists()
    subprocess.run(
        [sys.executable, "-c", "import pickle,sys; pickle.load(open(sys.argv[1], 'rb'))", path],
        check=True,
        timeout=60,
    )
    assert marker.exists()


def test_overview_opens_with_a_red_banner(seccorpus: tuple[Path, dict[str, Any]]) -> None:
    from ckpt_explorer.ui.components.overview import Overview
    from ckpt_explorer.ui.state import AppState

    root, _cases = seccorpus
    app = AppState(root)
    overview = Overview(app)
    assert app.browse.open("os_system.pt"), app.browse.error
    banner = overview._body[0]
    assert banner.alert_type == "danger" and "Unsafe" in banner.object
    assert "posix.system" in banner.object and "os_system/data.pkl" in banner.object
    assert app.browse.open("benign_model.pt")
    assert "security-banner" not in [getattr(b, "name", "") for b in overview._body]
    assert not (root / "PWNED").exists()


def test_pickers_mark_unsafe_paths(seccorpus: tuple[Path, dict[str, Any]]) -> None:
    from ckpt_explorer.ui.components.picker import PathPicker
    from ckpt_explorer.ui.state import AppState

    root, _cases = seccorpus
    app = AppState(root)
    assert "os_system.pt" in app.unsafe_note("os_system.pt")
    assert "may run code" in app.unsafe_note(".")  # the folder holding it
    assert app.unsafe_note("benign_model.pt") == ""
    picker = PathPicker(app.candidates(), "Checkpoint", warn=app.unsafe_note)
    picker.value = "os_system.pt"
    note = picker._layout[1]  # the red line under the box
    assert note.visible and "unsafe" in note.object
    picker.value = "benign_model.pt"
    assert not note.visible
    assert not (root / "PWNED").exists()


def test_no_banner_for_a_training_states_own_rng_file(tmp_path: Path) -> None:
    """An RNG file holding numpy's state is refused by torch's defaults (true, and reported as
    info by validate) but is no fault of a clean training state: no red banner."""
    import random

    import numpy as np
    import torch

    from ckpt_explorer.demo import TinyLM
    from ckpt_explorer.ui.components.overview import Overview
    from ckpt_explorer.ui.state import AppState
    from ckpt_explorer.validate import validate_checkpoint

    state = tmp_path / "checkpoint-2"
    state.mkdir()
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.save(model.state_dict(), state / "model.pt")
    torch.save(opt.state_dict(), state / "optimizer.pt")
    rng = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "cpu": torch.get_rng_state(),
    }
    torch.save(rng, state / "rng_state.pth")
    with pytest.raises(pickle.UnpicklingError):
        torch.load(state / "rng_state.pth", weights_only=True)
    report = validate_checkpoint(state, numeric=False)
    (refused,) = [f for f in report.findings if f.rule == "security.weights_only_refused"]
    assert refused.severity == "info" and refused.file == "rng_state.pth"
    app = AppState(tmp_path)
    overview = Overview(app)
    assert app.browse.open("checkpoint-2"), app.browse.error
    assert "security-banner" not in [getattr(b, "name", "") for b in overview._body]
