"""Chunked float64 statistics of a tensor pair: the partial sums and the figures from them.

Every element is widened to float64 before any arithmetic, so bf16/fp16/fp8 inputs give the
figures their values really have. Sums are float64: on CPU the fused kernel of
:mod:`.kernel` (numba), otherwise the torch ops of :class:`ChunkStats` (BLAS dot products).
Elements that are NaN or ±Inf on either side are counted per side and left out of the
figures (max/mean |a-b|, norms, relative L2, cosine); a non-finite element counts as outside
the tolerance unless both sides hold the same value (NaN with NaN counts as equal).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass
class PairFigures:
    """The figures of one tensor pair (None where undefined)."""

    max_abs: float | None = None
    mean_abs: float | None = None
    rel_l2: float | None = None
    cosine: float | None = None
    one_minus_cos: float | None = None
    diff_l2: float | None = None
    n_outside: int | None = None
    nan_a: int | None = None
    nan_b: int | None = None
    inf_a: int | None = None
    inf_b: int | None = None
    norm_a: float | None = None
    norm_b: float | None = None


@dataclass
class Sums:
    """Running float64 sums over the finite elements seen so far."""

    count: int = 0
    max_abs: float = 0.0
    sum_abs: float = 0.0
    aa: float = 0.0
    bb: float = 0.0
    ab: float = 0.0
    dd: float = 0.0
    ds: float = 0.0  # Σ(b-a)(a+b) = ||b||² - ||a||², without the cancellation
    outside: int = 0
    nan_a: int = 0
    nan_b: int = 0
    inf_a: int = 0
    inf_b: int = 0

    def merge(self, v: list[float]) -> None:
        """Add a vector from :meth:`ChunkStats.reduce` (same slot order)."""
        self.max_abs = max(self.max_abs, v[0])
        self.sum_abs += v[1]
        self.aa += v[2]
        self.bb += v[3]
        self.ab += v[4]
        self.dd += v[5]
        self.outside += round(v[6])
        self.nan_a += round(v[7])
        self.nan_b += round(v[8])
        self.inf_a += round(v[9])
        self.inf_b += round(v[10])
        self.count += round(v[11])
        self.ds += v[12]

    def figures(self) -> PairFigures:
        norm_a, norm_b, diff = math.sqrt(self.aa), math.sqrt(self.bb), math.sqrt(self.dd)
        if norm_a > 0:
            rel: float | None = diff / norm_a
        else:
            rel = 0.0 if diff == 0 else None
        cosine = self.ab / (norm_a * norm_b) if norm_a > 0 and norm_b > 0 else None
        if cosine is not None:
            cosine = max(-1.0, min(1.0, cosine))
        return PairFigures(
            max_abs=self.max_abs,
            mean_abs=self.sum_abs / self.count if self.count else 0.0,
            rel_l2=rel,
            cosine=cosine,
            one_minus_cos=self.one_minus_cos(norm_a, norm_b),
            diff_l2=diff,
            n_outside=self.outside,
            nan_a=self.nan_a,
            nan_b=self.nan_b,
            inf_a=self.inf_a,
            inf_b=self.inf_b,
            norm_a=norm_a,
            norm_b=norm_b,
        )

    def one_minus_cos(self, norm_a: float, norm_b: float) -> float | None:
        """1 - cos(a, b) without cancellation: ||a-b||² = (||a|| - ||b||)² + 2||a|| ||b||(1 - cos),
        with ||a|| - ||b|| = Σ(b-a)(a+b) / (||a|| + ||b||) from the differences themselves."""
        if not (norm_a > 0 and norm_b > 0):
            return None
        gap = self.ds / (norm_a + norm_b)
        return max(0.0, min(2.0, (self.dd - gap * gap) / (2.0 * norm_a * norm_b)))


SLOTS = 13


class ChunkStats:
    """Reusable float64 work buffers on one device; computes one chunk's 13 partial sums.

    The partials stay on the device (a float64 vector) so a GPU is not synchronised per chunk.
    """

    def __init__(self, elements: int, device: torch.device, atol: float, rtol: float) -> None:
        import torch

        self.device = device
        self.atol = float(atol)
        self.rtol = float(rtol)
        self._a = torch.empty(elements, dtype=torch.float64, device=device)
        self._b = torch.empty(elements, dtype=torch.float64, device=device)
        self._d = torch.empty(elements, dtype=torch.float64, device=device)
        self._s = torch.empty(elements, dtype=torch.float64, device=device)
        self.elements = elements

    def identical(self, a: torch.Tensor) -> torch.Tensor:
        """Partials for a chunk whose two sides are bit-identical: only ||a||² is computed."""
        import torch

        n = a.numel()
        A = self._a[:n]
        A.copy_(a.reshape(-1), non_blocking=True)
        aa = torch.dot(A, A)
        finite = bool(torch.isfinite(aa)) if self.device.type == "cpu" else None
        if finite is False or finite is None:
            # rare (or GPU): count non-finite values and sum the finite ones only
            fin = torch.isfinite(A)
            nan = torch.isnan(A).sum(dtype=torch.float64)
            inf = (~fin).sum(dtype=torch.float64) - nan
            Af = torch.where(fin, A, 0.0)
            aa = torch.dot(Af, Af)
            cnt = fin.sum(dtype=torch.float64)
            zero = torch.zeros((), dtype=torch.float64, device=self.device)
            return torch.stack([zero, zero, aa, aa, aa, zero, zero, nan, nan, inf, inf, cnt, zero])
        z = 0.0
        return torch.tensor(
            [z, z, float(aa), float(aa), float(aa), z, z, z, z, z, z, float(n), z],
            dtype=torch.float64,
        )

    def reduce(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Partials ``[max|d|, Σ|d|, Σa², Σb², Σab, Σd², outside, nanA, nanB, infA, infB, n,
        Σd(a+b)]`` (d = b - a)."""
        import torch

        n = a.numel()
        A, B, D = self._a[:n], self._b[:n], self._d[:n]
        A.copy_(a.reshape(-1), non_blocking=True)
        B.copy_(b.reshape(-1), non_blocking=True)
        aa, bb = torch.dot(A, A), torch.dot(B, B)
        check = aa + bb
        on_cpu = self.device.type == "cpu"
        if on_cpu and bool(torch.isfinite(check)):
            return self._finite(A, B, D, aa, bb, torch.tensor(float(n), dtype=torch.float64))
        fin_a, fin_b = torch.isfinite(A), torch.isfinite(B)
        nan_a, nan_b = torch.isnan(A), torch.isnan(B)
        n_nan_a = nan_a.sum(dtype=torch.float64)
        n_nan_b = nan_b.sum(dtype=torch.float64)
        n_inf_a = (~fin_a).sum(dtype=torch.float64) - n_nan_a
        n_inf_b = (~fin_b).sum(dtype=torch.float64) - n_nan_b
        fin = fin_a & fin_b
        # a non-finite position is outside unless both sides hold the same value (or both NaN)
        same = (nan_a & nan_b) | (A == B)
        bad = ((~fin) & ~same).sum(dtype=torch.float64)
        A.masked_fill_(~fin, 0.0)
        B.masked_fill_(~fin, 0.0)
        aa, bb = torch.dot(A, A), torch.dot(B, B)
        part = self._finite(A, B, D, aa, bb, fin.sum(dtype=torch.float64))
        extra = torch.stack(
            [
                torch.zeros((), dtype=torch.float64, device=A.device),
                torch.zeros((), dtype=torch.float64, device=A.device),
                *(torch.zeros((), dtype=torch.float64, device=A.device) for _ in range(4)),
                bad,
                n_nan_a,
                n_nan_b,
                n_inf_a,
                n_inf_b,
                torch.zeros((), dtype=torch.float64, device=A.device),
                torch.zeros((), dtype=torch.float64, device=A.device),
            ]
        )
        return part + extra

    def _finite(
        self,
        A: torch.Tensor,
        B: torch.Tensor,
        D: torch.Tensor,
        aa: torch.Tensor,
        bb: torch.Tensor,
        count: torch.Tensor,
    ) -> torch.Tensor:
        """Partials over finite values (masked-out positions hold 0 - 0: never outside)."""
        import torch

        ab = torch.dot(A, B)
        torch.sub(B, A, out=D)
        dd = torch.dot(D, D)
        S = self._s[: A.numel()]
        torch.add(A, B, out=S)
        ds = torch.dot(D, S)
        D.abs_()
        mx = D.max()
        sm = D.sum()
        if self.atol == 0.0 and self.rtol == 0.0:
            outside = torch.count_nonzero(D).to(torch.float64)
        else:
            thr = A.abs().mul_(self.rtol).add_(self.atol)
            outside = torch.gt(D, thr).sum(dtype=torch.float64)
        zero = torch.zeros((), dtype=torch.float64, device=A.device)
        return torch.stack(
            [
                mx,
                sm,
                aa,
                bb,
                ab,
                dd,
                outside,
                zero,
                zero,
                zero,
                zero,
                count.to(device=A.device),
                ds,
            ]
        )
