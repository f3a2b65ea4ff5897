"""``ckpt-explorer inspect X | head``: the CLI stops quietly when its reader goes away."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ckpt_explorer.demo import make_demo


def _demo(tmp_path: Path) -> Path:
    return make_demo(tmp_path / "demo") / "resumed_from"


def test_closed_reader_exits_quietly(tmp_path: Path) -> None:
    src = _demo(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckpt_explorer", "inspect", str(src), "--all"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the CLI writes anything
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert code == 141, err
    assert err == "", err


def test_pipe_into_head_prints_the_first_line_only(tmp_path: Path) -> None:
    import torch

    src = tmp_path / "many.pt"  # --all lists 4000 rows: far more than a pipe buffer holds
    torch.save({f"layers.{i}.weight": torch.zeros(2) for i in range(4000)}, src)
    cmd = f'"{sys.executable}" -m ckpt_explorer inspect "{src}" --all | head -1'
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.count("\n") == 1 and str(src) in proc.stdout
    assert proc.stderr == "", proc.stderr
    assert proc.returncode in (0, 141)
