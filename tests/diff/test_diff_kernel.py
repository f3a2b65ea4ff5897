"""The fused diff kernel: float64-exact figures, the same bits for any thread count, 1 - cos,
and the numeric scan / dashboard statistics that share it (torch fallback included)."""

from __future__ import annotations

import math
from decimal import Decimal, getcontext
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from test_diff import assert_figures, reference

from ckpt_explorer import diff_checkpoints, open_checkpoint
from ckpt_explorer.diff import kernel
from ckpt_explorer.diff.engine import Engine, plan_pairs
from ckpt_explorer.diff.rows import TensorDiff
from ckpt_explorer.ui.tensor_stats import tensor_stats as detail_stats
from ckpt_explorer.validate.numeric import tensor_stats as scan_stats

DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


@pytest.fixture(params=["numba", "torch"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test once with the compiled kernel and once with the torch fallback."""
    if request.param == "numba":
        pytest.importorskip("numba")
        monkeypatch.delenv("CKPT_EXPLORER_KERNEL", raising=False)
        monkeypatch.setattr(kernel, "_loaded", False)
        assert kernel.have_numba()
    else:
        monkeypatch.setattr(kernel, "_nk", None)
        monkeypatch.setattr(kernel, "_loaded", True)
        assert not kernel.have_numba()
    return str(request.param)


def hard_pair(dtype: torch.dtype, n: int = 60_000, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """A training-step-like pair plus values that stress a float32 shortcut: exponents far
    apart, subnormals, the largest finite values (their difference overflows float32)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, generator=g, dtype=torch.float64) * 0.02
    b = a + 1e-4 * torch.randn(n, generator=g, dtype=torch.float64)
    info = torch.finfo(dtype)
    big = info.max if dtype != torch.float64 else 2.0**500  # squares stay finite
    at = [0, 5003, 10007, 20011, 30011, 40000]  # in different chunks: each one decides a chunk
    a[at] = torch.tensor([1 + 2**-7, 2.0**-20, info.tiny / 4, big, -big, 3.0], dtype=a.dtype)
    b[at] = torch.tensor([3 * 2.0**-40, 1e3, -info.tiny, -big, big, 3.0], dtype=a.dtype)
    return a.to(dtype), b.to(dtype)


def write_pair(tmp_path: Path, a: torch.Tensor, b: torch.Tensor) -> tuple[Path, Path]:
    save_file({"w": a.reshape(200, -1)}, str(tmp_path / "a.safetensors"))
    torch.save({"w": b.reshape(200, -1)}, tmp_path / "b.bin")
    return tmp_path / "a.safetensors", tmp_path / "b.bin"


def run(a: Path, b: Path, threads: int, chunk_bytes: int = 4096) -> list[TensorDiff]:
    va, vb = open_checkpoint(a), open_checkpoint(b)
    return Engine(va, vb, threads=threads, chunk_bytes=chunk_bytes).run(plan_pairs(va, vb))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_figures_are_float64_exact(path: str, dtype: torch.dtype, tmp_path: Path) -> None:
    a, b = hard_pair(dtype)
    row = run(*write_pair(tmp_path, a, b), threads=2)[0]
    ref = reference(a, b)
    assert row.max_abs == ref["max_abs"]  # bit-exact
    assert_figures(row, ref)


def test_a_float32_difference_would_not_be_exact() -> None:
    """Why the kernel widens to float64 before subtracting: a bf16 (or fp16) difference is not
    always a float32 value (the operands' exponents can be far apart, or the difference can
    overflow float32), so a float32 difference would round max |a - b| and the sums."""
    a = torch.tensor([1 + 2**-7, 2.0**127 * 1.5], dtype=torch.bfloat16)
    b = torch.tensor([3 * 2.0**-40, -(2.0**127) * 1.5], dtype=torch.bfloat16)
    d32 = b.float() - a.float()
    d64 = b.double() - a.double()
    assert d32[0].item() != d64[0].item() and math.isinf(d32[1].item())
    assert math.isfinite(d64[1].item())
    h = torch.tensor([2048.0, 1.0], dtype=torch.float16)
    k = torch.tensor([2.0**-24, 2.0**-24 * 3], dtype=torch.float16)
    assert (k.float() - h.float())[0].item() != (k.double() - h.double())[0].item()
    if kernel.have_numba():
        for x, y in ((a, b), (a[:1], b[:1]), (h, k), (h[:1], k[:1])):
            want = (y.double() - x.double()).abs().max().item()
            assert kernel.pair_partials(x, y, 0.0, 0.0)[0] == want


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_same_bits_for_any_thread_count(path: str, dtype: torch.dtype, tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(5)
    a = torch.randn(1000, 2100, generator=g).to(dtype)
    b = (a.double() + 1e-3 * torch.randn(1000, 2100, generator=g, dtype=torch.float64)).to(dtype)
    b[7, 7] = float("nan")  # one chunk takes the careful path
    a[-1, -5] = float("inf")
    b[-10:] = a[-10:]  # the last chunk is identical, and holds an Inf
    fa, fb = write_pair(tmp_path, a.reshape(-1), b.reshape(-1))
    # chunks of 2**20 elements (the default): large enough for a multi-threaded BLAS to split
    rows = {k: [r.to_dict() for r in run(fa, fb, threads=k, chunk_bytes=2**16)] for k in (1, 2, 3)}
    assert rows[1] == rows[2] == rows[3]
    assert (rows[1][0]["nan_b"], rows[1][0]["inf_a"], rows[1][0]["inf_b"]) == (1, 1, 1)
    assert_figures(run(fa, fb, threads=2)[0], reference(a, b))


CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from test_diff_kernel import run
a, b = sys.argv[2], sys.argv[3]
rows = {k: [r.to_dict() for r in run(a, b, threads=k, chunk_bytes=2**16)] for k in (1, 2, 3)}
print(rows[1] == rows[2] == rows[3])
"""


def test_torch_fallback_same_bits_in_a_fresh_process(tmp_path: Path) -> None:
    """Worker threads start with OpenMP's default thread count (the setting is per thread); a
    fresh process shows it, where an earlier test may have changed the process's defaults."""
    import os
    import subprocess
    import sys

    g = torch.Generator().manual_seed(6)
    a = torch.randn(200, 80, generator=g)
    b = (a.double() + 1e-3 * torch.randn(200, 80, generator=g, dtype=torch.float64)).float()
    fa, fb = write_pair(tmp_path, a.reshape(-1), b.reshape(-1))
    env = dict(os.environ, CKPT_EXPLORER_KERNEL="torch")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(Path(__file__).parent), str(fa), str(fb)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert out.stdout.split()[-1] == "True", out.stderr


def exact_one_minus_cos(a: torch.Tensor, b: torch.Tensor) -> float:
    """1 - cos(a, b) in exact rational sums and 60-digit square roots."""
    xs = [Fraction(v) for v in a.double().tolist()]
    ys = [Fraction(v) for v in b.double().tolist()]
    aa = sum(x * x for x in xs)
    bb = sum(y * y for y in ys)
    ab = sum(x * y for x, y in zip(xs, ys, strict=True))
    getcontext().prec = 60

    def dec(f: Fraction) -> Decimal:
        return Decimal(f.numerator) / Decimal(f.denominator)

    return float(1 - dec(ab) / (dec(aa) * dec(bb)).sqrt())


def test_one_minus_cos_one_step_apart(path: str, tmp_path: Path) -> None:
    """Checkpoints one step apart: cos ≈ 1 - 1e-8, where ``1 - cosine`` keeps no digit."""
    g = torch.Generator().manual_seed(9)
    a = torch.randn(4000, generator=g, dtype=torch.float64)
    b = a + 1e-4 * torch.randn(4000, generator=g, dtype=torch.float64)
    row = run(*write_pair(tmp_path, a.float(), b.float()), threads=2)[0]
    want = exact_one_minus_cos(a.float(), b.float())
    assert 1e-9 < want < 1e-7
    assert row.one_minus_cos == pytest.approx(want, rel=1e-9)
    assert row.cosine is not None and row.cosine == pytest.approx(1 - want, rel=1e-14)
    (tmp_path / "scaled").mkdir()
    same = diff_checkpoints(*write_pair(tmp_path / "scaled", b.float(), b.float() * 2))
    assert same.tensors[0].one_minus_cos == pytest.approx(0.0, abs=1e-15)  # parallel: 1 - cos = 0


def value_cases() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(50_000, generator=g)
    with_nan = x.clone()
    with_nan[[5, 40_000]] = float("nan")
    with_nan[7] = float("-inf")
    return [
        x.to(torch.bfloat16),
        x.half(),
        x,
        x.double() * 1e300,
        with_nan,
        torch.zeros(1000),
        torch.full((10,), float("nan")),
        torch.zeros(0),
    ]


def test_scan_and_detail_statistics_share_the_kernel(path: str) -> None:
    for t in value_cases():
        x = t.double().numpy()
        fin = x[np.isfinite(x)]
        s = scan_stats(t, chunk_elements=4096)
        assert (s.nan, s.inf) == (int(np.isnan(x).sum()), int(np.isinf(x).sum()))
        assert (s.min, s.max) == ((fin.min(), fin.max()) if fin.size else (None, None))
        d = detail_stats(t)
        assert (d["nan"], d["inf"], d["zeros"]) == (s.nan, s.inf, int((x == 0).sum()))
        if fin.size:
            with np.errstate(over="ignore"):
                l2 = math.sqrt(np.sum(fin * fin))
            assert d["l2"] == pytest.approx(l2, rel=1e-12)
            assert (d["min"], d["max"]) == (fin.min(), fin.max())
            assert d["mean"] == pytest.approx(fin.mean(), rel=1e-12, abs=1e-300)
            assert d["mean_abs"] == pytest.approx(np.abs(fin).mean(), rel=1e-12)
        else:
            assert math.isnan(d["min"]) and math.isnan(d["mean"])
