"""The diff report shows 1 − cos in scientific notation (one step apart cos is 1 − 1e-8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer.cli import main
from ckpt_explorer.diff import diff_checkpoints
from ckpt_explorer.diff.figure_layout import fmt_one_minus_cos


def test_fmt_one_minus_cos() -> None:
    assert fmt_one_minus_cos(1.234e-08) == "1.2e-08"
    assert fmt_one_minus_cos(0.0) == "0"
    assert fmt_one_minus_cos(None) == "-"
    assert fmt_one_minus_cos(0.5) == "0.5" and fmt_one_minus_cos(2.0) == "2"
    assert fmt_one_minus_cos(4e-4) == "4.0e-04"


def test_text_report_and_json_show_one_minus_cos(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    g = torch.Generator().manual_seed(9)
    a = torch.randn(4000, generator=g, dtype=torch.float64)
    b = a + 1e-4 * torch.randn(4000, generator=g, dtype=torch.float64)
    pa, pb = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_file({"w": a.float(), "same": a.float()}, str(pa))
    save_file({"w": b.float(), "same": a.float()}, str(pb))
    row = next(r for r in diff_checkpoints(pa, pb).tensors if r.name == "w")
    assert row.one_minus_cos is not None and 1e-10 < row.one_minus_cos < 1e-7
    assert main(["diff", str(pa), str(pb)]) == 1
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "rel_l2" in line)
    assert "1−cos" in header and "cosine" not in header
    line = next(line for line in out.splitlines() if line.rstrip().endswith(" w"))
    assert f"{row.one_minus_cos:.1e}" in line.split()
    assert " 1 " not in line and "1.0000" not in out
    assert main(["diff", str(pa), str(pb), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    w = next(t for t in data["tensors"] if t["name"] == "w")
    assert w["one_minus_cos"] == pytest.approx(row.one_minus_cos, rel=1e-12)
