"""Numeric health, streamed: NaN/Inf, all-zero tensors, extreme magnitudes, per tensor.

Each tensor is read through ``view.load`` (mmap) in chunks of ``chunk_elements`` and reduced
in one pass per chunk by the diff's fused kernel (:mod:`ckpt_explorer.diff.kernel`; with
torch's ``aminmax`` where numba is missing), while a read-ahead thread asks the kernel for
the next file ranges from the OS. A small scan reads with numpy alone (:mod:`.numeric_raw`:
no torch, no numba to load). Figures are Python floats (float64 tensors keep their precision).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..contracts import Meter, ProgressFn
from ..io.readahead import Readahead
from ..types import TensorRecord
from ..view import CheckpointView
from .findings import Finding
from .numeric_raw import SMALL_SCAN_BYTES, raw_figures, readable
from .parts import is_float

CHUNK_ELEMENTS = 1 << 23
EXTREME = 1e4


@dataclass(frozen=True)
class TensorStats:
    """min, max (finite values), NaN and Inf counts and whether every element is zero."""

    numel: int
    min: float | None
    max: float | None
    nan: int
    inf: int

    @property
    def all_zero(self) -> bool:
        return self.numel > 0 and self.nan == 0 and self.inf == 0 and self.min == self.max == 0.0

    @property
    def absmax(self) -> float | None:
        if self.min is None or self.max is None:
            return None
        return max(abs(self.min), abs(self.max))

    def to_dict(self) -> dict[str, Any]:
        return {
            "numel": self.numel,
            "min": self.min,
            "max": self.max,
            "nan": self.nan,
            "inf": self.inf,
            "all_zero": self.all_zero,
        }


def tensor_stats(tensor: Any, chunk_elements: int = CHUNK_ELEMENTS) -> TensorStats:
    """Streamed figures of one (possibly mmapped) floating-point tensor."""
    import torch

    from ..diff import kernel

    flat = tensor.reshape(-1)
    if kernel.have_numba():
        step = max(1, chunk_elements)
        m = kernel.merge_values(
            [kernel.value_partials(flat[i : i + step]) for i in range(0, flat.numel(), step)]
        )
        found = m["finite"] > 0
        return TensorStats(
            flat.numel(),
            m["min"] if found else None,
            m["max"] if found else None,
            m["nan"],
            m["inf"],
        )
    lo, hi, nan, inf = math.inf, -math.inf, 0, 0
    for start in range(0, flat.numel(), chunk_elements):
        chunk = flat[start : start + chunk_elements]
        if chunk.dtype not in (torch.float32, torch.float64):
            chunk = chunk.float()  # half types: exact in float32
        cmin, cmax = torch.aminmax(chunk)
        a, b = float(cmin), float(cmax)
        if math.isfinite(a) and math.isfinite(b):
            lo, hi = min(lo, a), max(hi, b)
            continue
        n_nan = int(torch.isnan(chunk).sum())
        n_inf = int(torch.isinf(chunk).sum())
        nan, inf = nan + n_nan, inf + n_inf
        finite = chunk[torch.isfinite(chunk)]
        if finite.numel():
            fmin, fmax = torch.aminmax(finite)
            lo, hi = min(lo, float(fmin)), max(hi, float(fmax))
    n = flat.numel()
    return TensorStats(n, lo if lo != math.inf else None, hi if hi != -math.inf else None, nan, inf)


def scan(
    leaves: list[tuple[str, CheckpointView]],
    progress: ProgressFn | None = None,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> Iterator[tuple[str, TensorRecord, TensorStats]]:
    """(shown name, record, stats) of every floating-point tensor, each file front to back;
    ``progress`` gets ``scan`` events (bytes, the tensor being read)."""
    work = [
        (label, view, r)
        for label, view in leaves
        for r in view.disk_order()
        if is_float(r.dtype) and r.read_values is not None and r.numel
    ]
    total = sum(r.nbytes for _, _, r in work)
    ranges = [span for _, view, r in work if (span := view.disk_range(r)) is not None]
    meter = Meter(progress, "scan", total, "bytes")
    meter.emit(force=True)
    small = total <= SMALL_SCAN_BYTES
    with Readahead(ranges) as readahead:
        for label, view, r in work:
            meter.item = label + r.name
            figures = raw_figures(r, chunk_elements) if small and readable(r) else None
            if figures is not None:
                stats = TensorStats(*figures)
            else:
                stats = tensor_stats(view.load(r.name), chunk_elements)
            readahead.advance(meter.done + r.nbytes)
            meter.advance(r.nbytes)
            yield label + r.name, r, stats


# Zero by design: PEFT initialises LoRA's B (and lora_embedding_B) to zeros; BART, mBART,
# Marian, Pegasus and Blenderbot register ``final_logits_bias`` (1 x vocab) as zeros.
ZERO_BY_DESIGN = ("lora_B.", "lora_embedding_B", "final_logits_bias")


def _is_optimizer_state(name: str) -> bool:
    return ".state." in "." + name.replace("/", ".")


def _zero_by_design(name: str) -> bool:
    return any(marker in name for marker in ZERO_BY_DESIGN)


# DeepSpeed's flat fp32 partitions (and the flat moments beside them) end in alignment padding
# that DeepSpeed never initialises: real files hold values like 2e35 there. Their parameters
# are checked through the per-parameter views the reader gives, not the raw partitions.
FLAT_PARTITIONS = ("fp32_flat_groups.", "single_partition_of_fp32_groups.", "base_optimizer_state.")


def _flat_partition(name: str) -> bool:
    return any(marker in name for marker in FLAT_PARTITIONS)


# BatchNorm / InstanceNorm buffers: the running mean and variance of the activations a layer
# saw in training (``num_batches_tracked`` counts its batches), not weights. Their magnitude
# is the data's: a first layer fed raw pixels keeps a running_var in the thousands or more.
NORM_STATISTICS = ("running_mean", "running_var")
FP16_MAX = 65504.0


def norm_statistic(name: str) -> bool:
    """``name`` is a normalisation layer's running statistic (not an optimizer state of it)."""
    return name.rsplit(".", 1)[-1] in NORM_STATISTICS and not _is_optimizer_state(name)


def _norm_statistic(name: str, record: TensorRecord, stats: TensorStats) -> list[Finding]:
    """A running statistic is judged as one: NaN/Inf and a negative variance are faults (the
    layer's output becomes NaN); a large magnitude is the data's scale, said only where it
    would not survive a cast to float16."""
    if stats.nan or stats.inf:
        return [
            Finding(
                "numeric.nonfinite",
                "error",
                f"{name} holds {stats.nan} NaN and {stats.inf} Inf of {stats.numel} values "
                "(a normalisation layer's running statistic)",
                "Every output of this layer becomes NaN in eval mode; resume from an earlier "
                "checkpoint or recompute the statistics on training data.",
                tensor=name,
                file=record.file,
            )
        ]
    if name.endswith("running_var") and stats.min is not None and stats.min < 0:
        return [
            Finding(
                "numeric.negative_running_var",
                "error",
                f"{name} has negative values (min {stats.min:.4g}): a variance cannot be",
                "The buffer is corrupt or belongs to another tensor; recompute the statistics.",
                tensor=name,
                file=record.file,
            )
        ]
    absmax = stats.absmax
    if absmax is not None and absmax > FP16_MAX and record.dtype in ("float32", "float64"):
        return [
            Finding(
                "numeric.norm_statistic_range",
                "info",
                f"{name} reaches |x| = {absmax:.4g}: an activation statistic (the scale of "
                "this layer's inputs), not a weight",
                "Fine as saved; it becomes Inf if the model is cast to float16 (keep "
                "normalisation layers in float32 there).",
                tensor=name,
                file=record.file,
            )
        ]
    return []


def findings_for(
    name: str,
    record: TensorRecord,
    stats: TensorStats,
    extreme: float = EXTREME,
    bookkeeping: bool = False,
) -> list[Finding]:
    """The numeric findings of one tensor (none for DeepSpeed's raw flat partitions).
    ``bookkeeping``: the tensor is run state (a callback's ``best_score``, a metric tracker),
    where ±Inf is the usual 'nothing seen yet' start and magnitudes mean nothing."""
    out: list[Finding] = []
    if _flat_partition(name):
        return out
    if bookkeeping:
        if stats.nan or stats.inf:
            out.append(
                Finding(
                    "numeric.nonfinite_run_state",
                    "info",
                    f"{name} holds {stats.nan} NaN and {stats.inf} Inf of {stats.numel} values "
                    "(run state, not a weight: a best-so-far value starts at ±Inf)",
                    "Nothing to do unless this value should hold a metric by now.",
                    tensor=name,
                    file=record.file,
                )
            )
        return out
    if norm_statistic(name):
        return _norm_statistic(name, record, stats)
    if stats.nan or stats.inf:
        out.append(
            Finding(
                "numeric.nonfinite",
                "error",
                f"{name} holds {stats.nan} NaN and {stats.inf} Inf of {stats.numel} values",
                "Training diverged or the save was corrupted; resume from an earlier checkpoint.",
                tensor=name,
                file=record.file,
            )
        )
    if (
        stats.all_zero
        and sum(d > 1 for d in record.shape) >= 2  # a matrix, not a 1 x N row
        and not _is_optimizer_state(name)
        and not _zero_by_design(name)
    ):
        out.append(
            Finding(
                "numeric.all_zero",
                "warning",
                f"{name} is all zeros ({stats.numel} values)",
                "A weight matrix of zeros is usually a failed gather or a parameter that was "
                "never loaded; fine only for zero-initialised layers (e.g. LoRA B).",
                tensor=name,
                file=record.file,
            )
        )
    absmax = stats.absmax
    if absmax is not None and absmax > extreme:
        out.append(
            Finding(
                "numeric.extreme",
                "warning",
                f"{name} reaches |x| = {absmax:.4g} (threshold {extreme:g})",
                "Values this large overflow in fp16 and often precede divergence.",
                tensor=name,
                file=record.file,
            )
        )
    return out
