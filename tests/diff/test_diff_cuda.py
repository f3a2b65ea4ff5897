"""The diff's CUDA path (pinned staging, partials on the device) against its CPU path.

Marked ``cuda`` and skipped without a CUDA device; ``bench/gpu_check.sh`` runs them on a GPU
machine (``pytest -m cuda``). Sums may differ from the CPU's in the last bits (the device
reduces in another order), so they are compared within 1e-10 relative; max |a-b|, counts and
statuses must be equal. ``CKPT_TEST_CUDA_DEVICE=cpu`` runs the same assertions on the CPU
path (a dry run of this file where no GPU exists; it proves nothing about CUDA).
"""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from ckpt_explorer import diff_checkpoints
from ckpt_explorer.contracts import Progress
from ckpt_explorer.diff.engine import FLOAT_ELEMENTS

DEVICE = os.environ.get("CKPT_TEST_CUDA_DEVICE", "cuda")
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        DEVICE == "cuda" and not torch.cuda.is_available(), reason="skipped: no CUDA"
    ),
]
EXACT = {"max_abs", "n_outside", "nan_a", "nan_b", "inf_a", "inf_b", "status", "numel"}


def _pair(tmp_path: Path, a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple:
    save_file(a, str(tmp_path / "a.safetensors"))
    save_file(b, str(tmp_path / "b.safetensors"))
    return tmp_path / "a.safetensors", tmp_path / "b.safetensors"


def _same_rows(dev: Any, cpu: Any) -> None:
    assert len(dev.tensors) == len(cpu.tensors)
    for rd, rc in zip(dev.tensors, cpu.tensors, strict=True):
        d, c = rd.to_dict(), rc.to_dict()
        assert d.keys() == c.keys()
        for k, vc in c.items():
            vd = d[k]
            if k in EXACT or not isinstance(vc, float) or not isinstance(vd, float):
                assert vd == vc, (rc.name, k, vd, vc)
            else:
                assert math.isclose(vd, vc, rel_tol=1e-10, abs_tol=1e-13), (rc.name, k, vd, vc)


def _noisy(seed: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    a: dict[str, torch.Tensor] = {}
    for dt in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        name = str(dt).removeprefix("torch.")
        a[f"{name}.big"] = (torch.randn(3 * FLOAT_ELEMENTS + 5, generator=g) * 0.02).to(dt)
        a[f"{name}.small"] = torch.randn(7, 33, generator=g).to(dt)
    b = {
        k: (v.double() + 1e-3 * torch.randn(v.shape, generator=g).double()).to(v.dtype)
        for k, v in a.items()
    }
    return a, b


def test_every_element_differs_matches_cpu(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, *_noisy(0))
    dev = diff_checkpoints(a, b, device=DEVICE)
    cpu = diff_checkpoints(a, b, device="cpu")
    assert dev.options["device"].startswith(DEVICE)
    assert {r.status for r in dev.tensors} == {"changed"}
    _same_rows(dev, cpu)
    # max |a-b| against numpy float64 directly, for one 16-bit and one 32-bit tensor
    sa, sb = _noisy(0)
    for name in ("bfloat16.big", "float32.big"):
        ref = np.abs(sb[name].double().numpy() - sa[name].double().numpy()).max()
        row = next(r for r in dev.tensors if r.name == name)
        assert row.max_abs == float(ref)


def test_small_chunks_reuse_every_staging_slot(tmp_path: Path) -> None:
    """Chunks of 4 KiB: hundreds of host-to-device copies through the 4 pinned slots."""
    a, b = _pair(tmp_path, *_noisy(1))
    dev = diff_checkpoints(a, b, device=DEVICE, chunk_bytes=4096)
    cpu = diff_checkpoints(a, b, device="cpu", chunk_bytes=4096)
    _same_rows(dev, cpu)


def test_identical_and_partly_identical(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(2)
    base = (torch.randn(4 * FLOAT_ELEMENTS, generator=g) * 0.02).to(torch.bfloat16)
    part = base.clone()
    part[-10:] += 1.0  # only the last chunk differs: earlier chunks take the identical path
    a, b = _pair(
        tmp_path, {"same": base, "part": base.clone()}, {"same": base.clone(), "part": part}
    )
    dev = diff_checkpoints(a, b, device=DEVICE, chunk_bytes=2**20)
    cpu = diff_checkpoints(a, b, device="cpu", chunk_bytes=2**20)
    by = {r.name: r for r in dev.tensors}
    assert by["same"].status == "identical" and by["part"].status == "changed"
    assert by["part"].n_outside == 10
    _same_rows(dev, cpu)


def test_non_finite_and_tolerance(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(FLOAT_ELEMENTS + 17, generator=g)
    y = x + 1e-4 * torch.randn(x.shape, generator=g)
    x[5], y[5] = float("nan"), float("nan")  # both NaN: equal
    x[9], y[9] = float("inf"), 1.0  # outside, one Inf on A
    y[FLOAT_ELEMENTS + 3] = float("-inf")
    a, b = _pair(tmp_path, {"w": x, "h": x.half()}, {"w": y, "h": y.half()})
    for atol, rtol in ((0.0, 0.0), (1e-4, 1e-3)):
        dev = diff_checkpoints(a, b, device=DEVICE, atol=atol, rtol=rtol)
        cpu = diff_checkpoints(a, b, device="cpu", atol=atol, rtol=rtol)
        w = next(r for r in dev.tensors if r.name == "w")
        assert (w.nan_a, w.nan_b, w.inf_a, w.inf_b) == (1, 1, 1, 1)
        _same_rows(dev, cpu)


def test_dtype_mismatch(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2 * FLOAT_ELEMENTS + 1, generator=g)
    a, b = _pair(tmp_path, {"w": x.to(torch.bfloat16)}, {"w": x})
    dev = diff_checkpoints(a, b, device=DEVICE)
    cpu = diff_checkpoints(a, b, device="cpu")
    assert dev.tensors[0].status == "dtype_mismatch"
    _same_rows(dev, cpu)


def test_auto_and_cancel(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(6)
    sd = {f"layers.{i}.w": torch.randn(64, 64, generator=g) for i in range(40)}
    a, b = _pair(tmp_path, sd, {k: v + 1 for k, v in sd.items()})
    if DEVICE == "cuda":
        assert diff_checkpoints(a, b, device="auto").options["device"].startswith("cuda")
    stop = threading.Event()

    def progress(e: Progress) -> None:
        if e.done > e.total // 4:
            stop.set()

    r = diff_checkpoints(a, b, device=DEVICE, progress=progress, cancel=stop, chunk_bytes=2048)
    s = r.summary()
    assert r.cancelled and 0 < s["changed"] < 40 and s["not_compared"] == 40 - s["changed"]
