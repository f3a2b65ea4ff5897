"""One tensor across a run (timeline/distribution.py) on a real HF Trainer run and on runs
written here with safetensors: common bins, counts equal to the tensor's own histogram, a
sample of contiguous blocks for large tensors, missing checkpoints, unknown names, cancel."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ckpt_explorer.contracts import Progress
from ckpt_explorer.errors import CkptExplorerError
from ckpt_explorer.timeline import build_timeline
from ckpt_explorer.timeline.distribution import (
    block_sample,
    model_tensor_names,
    tensor_distribution,
)

NAME = "transformer.h.0.mlp.c_fc.weight"


@pytest.fixture(scope="module")
def hf_run(real_checkpoints: Any) -> Path:
    root, manifest = real_checkpoints("timeline")
    return Path(root) / manifest["cases"]["hf_clean"]["path"]


def test_hf_trainer_run_bins_every_checkpoint_on_common_edges(hf_run: Path) -> None:
    t = build_timeline(hf_run)
    name = f"model/{NAME}"
    assert name in model_tensor_names(t)
    d = tensor_distribution(t, name, bins=40)
    assert d.steps == [2, 4, 6, 8, 10, 12] and not d.missing
    truth = []
    for step in d.steps:
        with safe_open(str(hf_run / f"checkpoint-{step}" / "model.safetensors"), "pt") as f:
            truth.append(f.get_tensor(NAME).to(torch.float64))
    lo = min(float(x.min()) for x in truth)
    hi = max(float(x.max()) for x in truth)
    assert d.edges[0] == lo and d.edges[-1] == hi and len(d.edges) == 41
    for x, counts, n, st in zip(truth, d.counts, d.numel, d.stats, strict=True):
        assert n == x.numel() and sum(counts) == x.numel()  # small: every element binned
        assert counts == [int(c) for c in torch.histc(x, 40, lo, hi).tolist()]
        assert st["mean"] == pytest.approx(float(x.mean()), rel=1e-12)
        assert st["min"] == float(x.min()) and st["max"] == float(x.max())
    assert d.counts[0] != d.counts[-1]  # the weights moved during training


def _run(root: Path, tensors: dict[int, dict[str, torch.Tensor]]) -> Path:
    for step, ts in tensors.items():
        (root / f"step-{step}").mkdir(parents=True)
        save_file(ts, str(root / f"step-{step}" / "model.safetensors"))
    return root


def test_large_tensor_is_sampled_in_blocks_and_missing_steps_are_said(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(0)
    big = {s: torch.randn(600_000, generator=gen) * s for s in (1, 2, 3)}
    run = _run(
        tmp_path / "run",
        {
            1: {"w": big[1], "b": torch.ones(4)},
            2: {"w": big[2]},
            3: {"w": big[3], "b": torch.ones(4)},
        },
    )
    t = build_timeline(run)
    d = tensor_distribution(t, "w", sample=1 << 14)
    assert d.steps == [1, 2, 3] and d.numel == [600_000] * 3
    assert d.sampled == [1 << 14] * 3 and all(sum(c) == 1 << 14 for c in d.counts)
    # the spread grows with the step: the last step's values reach the outer bins
    assert d.stats[2]["std"] > 2.5 * d.stats[0]["std"]
    x = block_sample(big[1], 1 << 14, 1024)
    assert x[0] == big[1][0] and x[-1] == big[1][-1]  # blocks from first to last element
    assert torch.equal(x[:1024], big[1][:1024].double())
    b = tensor_distribution(t, "b")
    assert b.missing == [str(run / "step-2")] and b.counts[1] == [] and b.numel[1] == 0
    with pytest.raises(CkptExplorerError, match="no_such"):
        tensor_distribution(t, "no_such")


def test_cancel_stops_between_checkpoints(tmp_path: Path, hf_run: Path) -> None:
    run = tmp_path / "copy"
    shutil.copytree(hf_run, run)
    t = build_timeline(run)
    stop = threading.Event()
    seen: list[int] = []

    def progress(e: Progress) -> None:
        assert (e.stage, e.unit, e.total) == ("read", "checkpoints", 6)
        seen.append(e.done)
        if e.done == 2:
            stop.set()

    d = tensor_distribution(t, f"model/{NAME}", progress=progress, cancel=stop)
    assert seen == [1, 2] and d.steps == [2, 4] and len(d.counts) == 2
