"""One tensor across a run: its distribution of values at every checkpoint, on common bins.

What TensorBoard's histogram dashboard shows for a logged tensor, read from the checkpoints
themselves: for each checkpoint of a :class:`~.result.Timeline` (in step order) the tensor is
loaded lazily and a sample of contiguous blocks spread over it (all of it when small) is
binned on edges shared by every step, so the steps' histograms compare bin by bin (a heatmap
of bins x steps, or curves offset by step). Exact min, max, mean and std over the sample are
kept per step; a checkpoint without the tensor is listed as missing.

Example:
    >>> t = build_timeline("runs/exp1")                                        # doctest: +SKIP
    >>> d = tensor_distribution(t, "model/transformer.h.0.mlp.c_fc.weight")    # doctest: +SKIP
    >>> d.steps, len(d.edges), [sum(c) for c in d.counts if c]                 # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..contracts import Cancel, Progress, ProgressFn, is_cancelled
from ..errors import CkptExplorerError
from .discover import Candidate, discover
from .result import Timeline

if TYPE_CHECKING:
    import torch

SAMPLE = 1 << 16  # elements binned per checkpoint at most
BLOCK = 1024  # contiguous elements per sampled block
BINS = 60


@dataclass
class TensorDistribution:
    """A tensor's values over a run.

    Attributes:
        name: the tensor, as the timeline names it.
        steps: per checkpoint (step order), its step (None when unknown).
        paths: per checkpoint, its path.
        edges: the bin edges every step shares (``bins + 1`` values).
        counts: per checkpoint the count of sampled finite values in each bin ([] when the
            checkpoint lacks the tensor or holds no finite value).
        sampled: per checkpoint the elements binned (all of them when ``numel`` <= the
            sample size).
        numel: per checkpoint the tensor's elements (0 when missing).
        stats: per checkpoint ``min``, ``max``, ``mean``, ``std`` of the sampled finite
            values and ``nonfinite`` (NaN/Inf among them); {} when missing.
        missing: checkpoints (paths) without the tensor.
    """

    name: str
    steps: list[int | None] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    edges: list[float] = field(default_factory=list)
    counts: list[list[int]] = field(default_factory=list)
    sampled: list[int] = field(default_factory=list)
    numel: list[int] = field(default_factory=list)
    stats: list[dict[str, float]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        from .summaries import _json_safe

        return _json_safe(self.__dict__)  # type: ignore[no-any-return]


def block_sample(t: torch.Tensor, limit: int = SAMPLE, block: int = BLOCK) -> torch.Tensor:
    """Up to ``limit`` elements of ``t`` as float64: all of them when it is small, else blocks
    of ``block`` contiguous elements spread evenly from its first to its last element (a
    mmapped tensor is then read a few pages at a time, never whole)."""
    import torch

    flat = t.reshape(-1)
    n = flat.numel()
    if n <= limit:
        return flat.to(torch.float64)
    blocks = max(1, limit // block)
    span = n - block
    starts = [span * i // max(blocks - 1, 1) for i in range(blocks)]
    return torch.cat([flat[s : s + block].to(torch.float64) for s in starts])


def model_tensor_names(t: Timeline) -> list[str]:
    """Float model tensors of the run's last readable checkpoint (the names to offer)."""
    for c in reversed(t.checkpoints):
        if c.error is None and c.tensors:
            return [
                n
                for n, f in c.tensors.items()
                if f.state is None and f.role is None and f.dtype.startswith(("float", "bfloat"))
            ]
    return []


def _load(cand: Candidate | None, path: str, name: str) -> torch.Tensor | None:
    """The tensor ``name`` of one checkpoint (its parts searched by their labels)."""
    from ..api import open_checkpoint

    if cand is not None and cand.parts:
        for label, f in cand.parts:
            if name.startswith(label):
                view = open_checkpoint(f)
                rest = name[len(label) :]
                if rest in view:
                    return view.load(rest)
        return None
    view = open_checkpoint(path)
    return view.load(name) if name in view else None


def tensor_distribution(
    t: Timeline,
    name: str,
    bins: int = BINS,
    sample: int = SAMPLE,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
) -> TensorDistribution:
    """The distribution of ``name`` at each readable checkpoint of ``t`` (see the module
    docstring); a ``Progress`` (stage ``"read"``, in checkpoints) after each checkpoint, a set
    ``cancel`` stops between checkpoints (the steps read so far are returned, maybe none).

    Raises:
        CkptExplorerError: no checkpoint of the run holds ``name``.
    """
    import torch

    cands = {str(c.path): c for c in discover(t.run_dir)}
    readable = [c for c in t.checkpoints if c.error is None]
    out = TensorDistribution(name)
    samples: list[torch.Tensor | None] = []
    for i, c in enumerate(readable):
        if is_cancelled(cancel):
            break
        x = _load(cands.get(c.path), c.path, name)
        out.steps.append(c.step)
        out.paths.append(c.path)
        if x is None:
            out.missing.append(c.path)
            out.numel.append(0)
            out.sampled.append(0)
            samples.append(None)
        else:
            s = block_sample(x, sample)
            out.numel.append(x.numel())
            out.sampled.append(s.numel())
            samples.append(s)
        if progress is not None:
            progress(Progress("read", i + 1, len(readable), "checkpoints", str(c.path)))
    stopped = is_cancelled(cancel)
    if all(s is None for s in samples) and not stopped:
        raise CkptExplorerError(
            t.run_dir,
            f"a tensor named {name!r} in the run's checkpoints",
            f"none in {len(readable)} checkpoint(s)",
            "Pick a name the checkpoints list (the Weight map shows them).",
        )
    finite: list[torch.Tensor | None] = [
        s[torch.isfinite(s)] if s is not None else None for s in samples
    ]
    lows = [float(f.min()) for f in finite if f is not None and f.numel()]
    highs = [float(f.max()) for f in finite if f is not None and f.numel()]
    lo, hi = (min(lows), max(highs)) if lows else (0.0, 1.0)
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    out.edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64).tolist()
    for taken, kept in zip(samples, finite, strict=True):
        if taken is None or kept is None:
            out.counts.append([])
            out.stats.append({})
            continue
        counts = torch.histc(kept, bins=bins, min=lo, max=hi) if kept.numel() else torch.zeros(0)
        out.counts.append([int(c) for c in counts.tolist()])
        out.stats.append(_stats(kept, taken.numel() - kept.numel()))
    return out


def _stats(f: torch.Tensor, nonfinite: int) -> dict[str, float]:
    if not f.numel():
        return {"nonfinite": float(nonfinite)}
    mean = float(f.mean())
    std = float(f.std(unbiased=False)) if f.numel() > 1 else 0.0
    return {
        "min": float(f.min()),
        "max": float(f.max()),
        "mean": mean,
        "std": std if math.isfinite(std) else float("nan"),
        "nonfinite": float(nonfinite),
    }


def checkpoint_label(step: int | None, path: str) -> str:
    """How a checkpoint is named on an axis: its step, else its folder or file name."""
    return str(step) if step is not None else Path(path).name
