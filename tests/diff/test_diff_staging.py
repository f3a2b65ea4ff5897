"""The accelerator float pass's staging pipeline (worker threads filling slots ahead), on CPU.

``Engine._float_pass_device`` is driven directly with CPU tensors (plain buffers instead of
pinned ones, no CUDA events): the slot rotation, the chunk order of the partials, identical
chunks, mixed dtypes and cancellation are checked against the CPU float pass. What only a
GPU shows (pinned memory, events, non-blocking copies) is in tests/diff/test_diff_cuda.py.
"""

from __future__ import annotations

import math
import threading

import pytest
import torch

from ckpt_explorer.contracts import Progress
from ckpt_explorer.diff.engine import Engine
from ckpt_explorer.diff.stats import PairFigures

N = 50_000


def _figures(eng: Engine, a: torch.Tensor, b: torch.Tensor, device_path: bool) -> PairFigures:
    step = 1000  # 50 chunks through the slots (at most 10 of them)
    with eng._workers():
        if device_path:
            sums = eng._float_pass_device(a, b, a.dtype == b.dtype, range(0, a.numel(), step), step)
        else:
            eng.chunk_bytes = step * max(a.element_size(), b.element_size())
            sums = eng._float_pass(a, b, a.dtype == b.dtype)
    return sums.figures()


def _pair(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(N, generator=g).to(dtype)
    b = a.clone()
    b[N // 3 :] += (1e-2 * torch.randn(N - N // 3, generator=g)).to(dtype)  # first third equal
    b[17] = float("nan")
    return a, b


def _same(x: PairFigures, y: PairFigures) -> None:
    for k, vx in vars(x).items():
        vy = getattr(y, k)
        if isinstance(vx, float) and k != "max_abs":
            assert math.isclose(vx, vy, rel_tol=1e-11, abs_tol=1e-14), (k, vx, vy)
        else:
            assert vx == vy, (k, vx, vy)


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_staged_pass_equals_cpu_pass(threads: int, dtype: torch.dtype) -> None:
    a, b = _pair(threads, dtype)
    staged = _figures(Engine(None, None, threads=threads), a, b, True)  # type: ignore[arg-type]
    plain = _figures(Engine(None, None, threads=1), a, b, False)  # type: ignore[arg-type]
    assert staged.n_outside == plain.n_outside > 0 and staged.nan_b == 1
    _same(staged, plain)
    # the same bits for any number of staging threads (partials merged in chunk order)
    again = _figures(Engine(None, None, threads=3), a, b, True)  # type: ignore[arg-type]
    assert vars(again) == vars(staged) or threads != 3


def test_staged_identical_and_mixed_dtypes() -> None:
    a, _ = _pair(5, torch.float32)
    eng = Engine(None, None, threads=2)  # type: ignore[arg-type]
    same = _figures(eng, a, a.clone(), True)
    assert same.n_outside == 0 and same.max_abs == 0.0 and same.norm_a == same.norm_b
    low = a.to(torch.bfloat16)
    mixed = _figures(Engine(None, None, threads=2), low, a, True)  # type: ignore[arg-type]
    ref = _figures(Engine(None, None, threads=1), low, a, False)  # type: ignore[arg-type]
    _same(mixed, ref)


def test_staged_cancel_stops_and_drains() -> None:
    a, b = _pair(6, torch.float32)
    seen: list[int] = []
    stop = threading.Event()

    def progress(e: Progress) -> None:
        seen.append(e.done)
        if len(seen) == 5:
            stop.set()

    eng = Engine(None, None, threads=4, progress=progress, cancel=stop)  # type: ignore[arg-type]
    eng.total = 2 * a.numel() * 4
    _figures(eng, a, b, True)
    assert eng.cancelled and len(seen) == 5


def test_single_chunk_tensors_run_inline_with_the_same_bits() -> None:
    """A tensor of one chunk is reduced on the calling thread (no pool started: runs of many
    small tensors paid a thread hand-off per tensor); a multi-chunk one starts the pool, and
    both give the bits of the one-thread pass."""
    a, b = _pair(7, torch.float32)
    small_a, small_b = a[:1000].clone(), b[:1000].clone()
    eng = Engine(None, None, threads=4)  # type: ignore[arg-type]
    with eng._workers():
        small = eng._float_pass(small_a, small_b, True).figures()
        assert eng._pool is None
        eng.chunk_bytes = 1000 * 4
        big = eng._float_pass(a, b, True).figures()
        assert eng._pool is not None
    assert eng._pool is None  # shut down with the run
    one = Engine(None, None, threads=1)  # type: ignore[arg-type]
    assert vars(small) == vars(one._float_pass(small_a, small_b, True).figures())
    one.chunk_bytes = 1000 * 4
    assert vars(big) == vars(one._float_pass(a, b, True).figures())
