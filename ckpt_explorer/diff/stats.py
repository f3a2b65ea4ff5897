"""Chunked float64 statistics of a tensor pair: the partial sums and the figures from them.

Every element is widened to float64 before any arithmetic, so bf16/fp16/fp8 inputs give the
figures their values really have. Sums are float64: on CPU the fused kernel of
:mod:`.kernel` (numba), otherwise the torch ops of :class:`ChunkStats` (BLAS dot products).
Elements that are NaN or ±Inf on either side are counted per side and left out of the
figures (max/mean |a-b|, norms, relative L2, cosine); a non-finite element counts as outside
the tolerance unless both sides hold the same value (NaN with NaN counts as equal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .figure_layout import FIGURES, PARTIALS, Chunk

if TYPE_CHECKING:
    import torch


class PairFigures:
    """The figures of one tensor pair, as attributes named by the layout's ``FIGURES`` (None
    where undefined)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:  # the figures are the layout's: typed as Any
        raise AttributeError(name)


class Sums:
    """Running partials over the chunks seen so far, by the layout's ``PARTIALS`` names
    (floats summed, counts as integers, maxima kept)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {p.name: 0 if p.merge == "count" else 0.0 for p in PARTIALS}

    def merge(self, v: list[float]) -> None:
        """Add a vector of chunk partials (the layout's slot order)."""
        s = self.values
        for p, x in zip(PARTIALS, v, strict=True):
            if p.merge == "max":
                s[p.name] = max(s[p.name], x)
            elif p.merge == "count":
                s[p.name] += round(x)
            else:
                s[p.name] += x

    def figures(self) -> PairFigures:
        return PairFigures({f.name: f.derive(self.values) for f in FIGURES})


SLOTS = len(PARTIALS)


class ChunkStats:
    """Reusable float64 work buffers on one device; computes one chunk's partial sums (the
    figure layout's ``PARTIALS``).

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
            values = {"sq": aa, "nan": nan, "inf": inf, "finite": fin.sum(dtype=torch.float64)}
            zero = torch.zeros((), dtype=torch.float64, device=self.device)
            return torch.stack(
                [zero if p.identical is None else values[p.identical] for p in PARTIALS]
            )
        scalars = {"sq": float(aa), "nan": 0.0, "inf": 0.0, "finite": float(n)}
        return torch.tensor(
            [0.0 if p.identical is None else scalars[p.identical] for p in PARTIALS],
            dtype=torch.float64,
        )

    def reduce(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """The partials of the layout's ``PARTIALS``, in order (d = b - a)."""
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
        # a non-finite position is a mismatch unless both sides hold the same value (or NaN)
        same = (nan_a & nan_b) | (A == B)
        bad = ((~fin) & ~same).sum(dtype=torch.float64)
        A.masked_fill_(~fin, 0.0)
        B.masked_fill_(~fin, 0.0)
        aa, bb = torch.dot(A, A), torch.dot(B, B)
        part = self._finite(A, B, D, aa, bb, fin.sum(dtype=torch.float64))
        zero = torch.zeros((), dtype=torch.float64, device=A.device)
        counts = {"nan_a": n_nan_a, "nan_b": n_nan_b, "inf_a": n_inf_a, "inf_b": n_inf_b}
        extra = torch.stack([bad if p.mismatch else counts.get(p.name, zero) for p in PARTIALS])
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
        """Partials over finite values (masked-out positions hold 0 - 0: never a difference);
        the bookkeeping slots are 0 but the finite count."""
        import torch

        torch.sub(B, A, out=D)
        S = self._s[: A.numel()]
        torch.add(A, B, out=S)
        c = Chunk(A, B, D, S, aa, bb, self.atol, self.rtol)
        got: dict[str, torch.Tensor] = {}
        for p in PARTIALS:  # the signed ones first, then |D| in place for the rest
            if p.signed and p.torch is not None:
                got[p.name] = p.torch(c)
        D.abs_()
        for p in PARTIALS:
            if not p.signed and p.torch is not None:
                got[p.name] = p.torch(c)
        zero = torch.zeros((), dtype=torch.float64, device=A.device)
        got["count"] = count.to(device=A.device)
        return torch.stack([got.get(p.name, zero).to(torch.float64) for p in PARTIALS])
