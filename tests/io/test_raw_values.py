"""records_equal (values from the file's bytes) answers as torch.equal does, and decides an
early difference without importing numpy."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer import open_checkpoint
from ckpt_explorer.io.raw_values import PEEK, records_equal

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.uint8]


def _pairs(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    n = PEEK  # twice PEEK bytes or more: differences before and after the first peek
    if dtype.is_floating_point:
        base = torch.randn(n, generator=g).to(dtype)
        specials = torch.tensor([0.0, -0.0, math.nan, math.inf, 1e-40]).to(dtype)
    else:
        base = torch.randint(0, 100, (n,), generator=g).to(dtype)
        specials = torch.tensor([0, 1, 2, 3, 4]).to(dtype)
    out = {"base": base, "same": base.clone()}
    if dtype.is_floating_point:
        signed = base.clone()
        signed[:5] = torch.tensor([0.0, 0.0, 1.0, 2.0, 3.0]).to(dtype)
        out["zeros"] = signed.clone()
        signed[:2] = torch.tensor([-0.0, -0.0]).to(dtype)
        out["negzeros"] = signed  # other bytes, equal values
        nan = base.clone()
        nan[0] = math.nan
        out["nan"], out["nan2"] = nan, nan.clone()  # same bytes, never equal
    late = base.clone()
    late[-1] = specials[1] if base[-1] != specials[1] else specials[2]
    out["late"] = late  # differs only past the first peek
    early = base.clone()
    early[0] = specials[3] if base[0] != specials[3] else specials[4]
    out["early"] = early
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_records_equal_is_torch_equal(tmp_path: Path, dtype: torch.dtype) -> None:
    tensors = _pairs(dtype)
    save_file(tensors, str(tmp_path / "t.safetensors"))
    view = open_checkpoint(tmp_path / "t.safetensors")
    for a in tensors:
        for b in tensors:
            want = torch.equal(view.load(a), view.load(b))
            assert records_equal(view.record(a), view.record(b)) is want, (a, b)


def test_an_early_difference_needs_no_numpy(tmp_path: Path) -> None:
    save_file(_pairs(torch.bfloat16), str(tmp_path / "t.safetensors"))
    code = (
        "import sys; from ckpt_explorer import open_checkpoint; "
        "from ckpt_explorer.io.raw_values import records_equal; "
        f"v = open_checkpoint({str(tmp_path / 't.safetensors')!r}); "
        "assert records_equal(v.record('base'), v.record('early')) is False; "
        "assert 'numpy' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=120)
