"""The hostile corpus: every case gives the project's own error (or lists safely), never runs code."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import ckpt_explorer
from ckpt_explorer import open_checkpoint
from ckpt_explorer.cli import main


def test_corpus_is_large_enough(corpus: tuple[Path, dict[str, Any]]) -> None:
    assert len(corpus[1]) >= 40


def test_every_case_is_handled_cleanly(corpus: tuple[Path, dict[str, Any]]) -> None:
    root, cases = corpus
    problems = []
    for name, case in cases.items():
        path = root / case["path"]
        expected = case["error"]
        try:
            view = open_checkpoint(path)
            for record in view.tensors:
                view.load(record.name)
        except ckpt_explorer.CkptExplorerError as e:
            if expected == "ok" or not isinstance(e, getattr(ckpt_explorer, expected)):
                problems.append(f"{name}: raised {type(e).__name__} ({e}), expected {expected}")
            elif str(path) not in str(e) and path.name not in str(e):
                problems.append(f"{name}: message does not name the file: {e}")
        except Exception as e:  # anything else is a bug
            problems.append(f"{name}: {type(e).__name__}: {e}")
        else:
            if expected != "ok":
                problems.append(f"{name}: opened without error, expected {expected}")
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["inspect", str(path), "--json"])
        lines = err.getvalue().strip().splitlines()
        if expected != "ok" and (code != 2 or len(lines) != 1 or "Traceback" in err.getvalue()):
            problems.append(f"{name}: CLI exit {code}, stderr {err.getvalue()[:200]!r}")
        if expected == "ok":
            try:
                json.loads(out.getvalue())
            except ValueError:
                problems.append(f"{name}: CLI --json printed no JSON")
    assert not (root / "PWNED").exists(), "a payload in the corpus was executed"
    assert not problems, "\n".join(problems)


def test_other_commands_handle_every_case(corpus: tuple[Path, dict[str, Any]]) -> None:
    """validate, diff, doctor and convert --dry-run on every case: an exit code, at most one
    error line, never an exception out of main()."""
    root, cases = corpus
    good = str(root / "_good.safetensors")
    problems = []
    for name, case in cases.items():
        path = str(root / case["path"])
        for argv in (
            ["validate", path],
            ["diff", path, good],
            ["doctor", good, path],
            ["convert", path, str(root / "_out.safetensors"), "--to", "safetensors", "--dry-run"],
        ):
            out, err = io.StringIO(), io.StringIO()
            try:
                with redirect_stdout(out), redirect_stderr(err):
                    code = main(argv)
            except SystemExit as e:  # argparse
                problems.append(f"{name}: {argv[0]} exited {e.code}")
                continue
            except Exception as e:
                problems.append(f"{name}: {argv[0]} raised {type(e).__name__}: {e}"[:300])
                continue
            if code == 2 and len(err.getvalue().strip().splitlines()) != 1:
                problems.append(f"{name}: {argv[0]} exit 2 with stderr {err.getvalue()[:200]!r}")
    assert not (root / "PWNED").exists(), "a payload in the corpus was executed"
    assert not problems, "\n".join(problems)


def test_cli_processes_print_no_traceback(corpus: tuple[Path, dict[str, Any]]) -> None:
    root, cases = corpus
    picked = [c for c in cases.values() if c["error"] != "ok"][::6]
    for case in picked:
        proc = subprocess.run(
            [sys.executable, "-m", "ckpt_explorer", "inspect", str(root / case["path"])],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert proc.returncode == 2, (case, proc.stderr)
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not (root / "PWNED").exists()
