"""Does B descend from A at all? Told by the model weights' correlation, and by the RNG.

A state saved a few (or many) optimizer steps after resuming from A keeps A's weights up to
small updates: each large tensor of B correlates strongly with A's (after removing its mean).
A state resumed from another run (another seed, another folder) starts from other weights:
its large tensors are about uncorrelated with A's, all of them (a fault that wrecks some
tensors, such as a reordered optimizer, leaves the others near A's). Small tensors (norm weights start at 1 in
every run) and tensors with few elements take no vote.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from ..readers.roles import is_rng_tensor
from .rng_lineage import TORCH_CPU_STATE_BYTES, TorchRng, not_restored, parse

if TYPE_CHECKING:
    import torch

    from ..validate.parts import ModelPart
    from ..view import CheckpointView

SAMPLE = 4096  # first elements of each tensor compared
MIN_ELEMENTS = 256  # a tensor with fewer takes no vote
MAX_TENSORS = 64  # tensors compared at most
UNRELATED = 0.3  # median correlation below this: B's weights do not come from A's
MIN_VOTES = 2
MAX_RELATED = 0.1  # another run keeps (almost) no large tensor correlated with A's


def _sample(model: ModelPart, name: str) -> torch.Tensor | None:
    try:
        import torch

        t = model.view.load(name).reshape(-1)[:SAMPLE].to(torch.float64)
    except Exception:
        return None
    if not bool(torch.isfinite(t).all()):
        return None
    t = t - t.mean()
    norm = float(t.norm())
    return t / norm if norm > 0 else None


def weight_correlations(a: ModelPart, b: ModelPart) -> list[tuple[str, float]]:
    """(name, correlation of B's tensor with A's) for the large tensors both hold."""
    by_name = {r.name: r for r in b.records}
    out: list[tuple[str, float]] = []
    for ra in a.records:
        rb = by_name.get(ra.name)
        if rb is None or ra.shape != rb.shape or ra.numel < MIN_ELEMENTS:
            continue
        if not (ra.dtype.startswith(("float", "bfloat")) and rb.dtype == ra.dtype):
            continue
        xa, xb = _sample(a, ra.name), _sample(b, rb.name)
        if xa is not None and xb is not None:
            out.append((ra.name, float(xa @ xb)))
        if len(out) >= MAX_TENSORS:
            break
    return out


def unrelated_weights(a: ModelPart, b: ModelPart) -> str | None:
    """Evidence that B's weights do not descend from A's (None: they do, or cannot tell)."""
    found = weight_correlations(a, b)
    if len(found) < MIN_VOTES:
        return None
    median = statistics.median(c for _, c in found)
    related = sum(c >= UNRELATED for _, c in found)
    if median >= UNRELATED or related > MAX_RELATED * len(found):
        return None  # some tensors kept A's values: B moved on from A (far, for some)
    low = sorted(found, key=lambda x: x[1])[:3]
    shown = ", ".join(f"{n} {c:.2f}" for n, c in low)
    return (
        f"B's weights are unrelated to A's: median correlation {median:.2f} over {len(found)} "
        f"large tensors ({shown}); a state resumed from A keeps A's weights up to small "
        "updates (correlation near 1)"
    )


def torch_rng(view: CheckpointView) -> TorchRng | None:
    """The first torch CPU generator state the view holds (None: none)."""
    for record in view:
        if record.dtype != "uint8" or record.shape != (TORCH_CPU_STATE_BYTES,):
            continue
        if not is_rng_tensor(record):
            continue
        try:
            raw = view.load(record.name).numpy().tobytes()
        except Exception:
            continue
        found = parse(raw)
        if found is not None:
            return found
    return None


def rng_not_restored(va: CheckpointView, vb: CheckpointView) -> str | None:
    """Evidence that B's torch RNG state was not restored from A's (None: it was, or no
    torch RNG state on a side, or too far apart to tell)."""
    ra, rb = torch_rng(va), torch_rng(vb)
    if ra is None or rb is None:
        return None
    return not_restored(ra, rb)
