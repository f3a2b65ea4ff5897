"""A small scan's numeric figures come from numpy alone, equal to the kernel/torch path's.

Tensors of every float dtype the raw path reads (with NaN, Inf, all-NaN, signed zeros and
ordinary values) are written by safetensors and ``torch.save``; each record's figures from
:func:`raw_figures` equal :func:`tensor_stats` of the tensor torch loads. A child process runs
``validate`` (numeric scan included) on a small safetensors model and reports that it
imported neither torch nor numba, with the report the torch path gives in-process.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer import open_checkpoint, validate_checkpoint
from ckpt_explorer.validate import numeric
from ckpt_explorer.validate.numeric_raw import raw_figures, readable

DTYPES = ("bfloat16", "float16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    out: dict[str, torch.Tensor] = {}
    for name in DTYPES:
        dtype = getattr(torch, name)
        base = torch.randn(5, 9, generator=g) * 3
        bad = base.clone()
        bad[0, 1], bad[2, 2], bad[4, 8] = math.nan, math.inf, -math.inf
        zeros = torch.tensor([0.0, -0.0, 0.0, -0.0])
        out[f"{name}.plain"] = base.to(dtype)
        out[f"{name}.bad"] = bad.to(dtype)
        out[f"{name}.zeros"] = zeros.to(dtype)
        if name not in ("float8_e4m3fn",):  # e4m3fn has no Inf (it saturates to NaN)
            out[f"{name}.nonfinite"] = torch.tensor([math.nan, math.inf]).to(dtype)
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("numeric_raw")
    sd = _tensors()
    save_file(sd, str(root / "model.safetensors"))
    torch.save(sd, root / "pytorch_model.bin")
    return [root / "model.safetensors", root / "pytorch_model.bin"]


@pytest.mark.parametrize("chunk", [7, 1 << 20])
def test_raw_figures_equal_the_torch_paths(files: list[Path], chunk: int) -> None:
    for path in files:
        view = open_checkpoint(path)
        assert {r.dtype for r in view.tensors} == set(DTYPES)
        for r in view.tensors:
            assert readable(r), r.name
            raw = raw_figures(r, chunk)
            ref = numeric.tensor_stats(view.load(r.name), chunk)
            assert raw is not None, r.name
            want = (ref.numel, ref.min, ref.max, ref.nan, ref.inf)
            assert raw[0] == want[0] and raw[3:] == want[3:], (path.name, r.name)
            for got, exp in zip(raw[1:3], want[1:3], strict=True):
                assert (got is None) == (exp is None), (path.name, r.name)
                if got is not None:  # a zero's sign aside (the raw path says +0.0)
                    assert got == exp and type(got) is float, (path.name, r.name)


def test_a_non_dense_tensor_goes_through_torch(tmp_path: Path) -> None:
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    torch.save({"t": base.t()}, tmp_path / "strided.pt")  # a transposed view: not one block
    (record,) = open_checkpoint(tmp_path / "strided.pt").tensors
    assert raw_figures(record, 1 << 20) is None


CHILD = r"""
import json, sys
from ckpt_explorer.cli import main
code = main(["validate", sys.argv[1], "--json"])
print(json.dumps({"code": code, "heavy": sorted(
    m for m in ("torch", "numba", "pandas", "plotly", "scipy") if m in sys.modules)}))
"""


def test_validate_of_a_small_safetensors_model_imports_no_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    sd["0.weight"][3, 3] = math.nan  # a finding of the numeric scan
    save_file(sd, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).parent.parent.parent,
    )
    lines = proc.stdout.splitlines()
    result = json.loads(lines[-1])
    assert result["heavy"] == []
    report = json.loads("\n".join(lines[:-1]))
    monkeypatch.setattr(numeric, "SMALL_SCAN_BYTES", -1)  # every tensor through torch
    reference = validate_checkpoint(tmp_path)
    assert "numeric.nonfinite" in {f["rule"] for f in report["findings"]}
    assert report["findings"] == reference.to_json()["findings"]
    assert result["code"] == (1 if not reference.ok else 0)
