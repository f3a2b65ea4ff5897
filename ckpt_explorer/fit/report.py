"""``fit`` as one report: facts, checks, memory, grid; JSON and text forms."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..api import as_view
from ..readable import human_bytes
from ..view import CheckpointView
from .arch import ArchFacts, model_tensors, read_arch
from .checks import Check, run_checks
from .grid import fit_grid
from .layout import Layout
from .memory import Memory, memory_per_gpu

if TYPE_CHECKING:
    import pandas as pd

    from ..io.location import Location


# A frozen record's field list: alike in shape with other reports' records, nothing shared.
@dataclass(frozen=True)
class FitReport:
    """``fits``: True all checks pass, False one fails, None something is unknown."""

    path: str
    layout: Layout
    arch: ArchFacts
    checks: tuple[Check, ...]
    memory: Memory | None
    grid: tuple[dict[str, object], ...]

    @property
    def fits(self) -> bool | None:
        oks = [c.ok for c in self.checks]
        if self.memory is not None:
            oks.append(self.memory.fits if self.layout.gpu_mem is not None else True)
        if False in oks:
            return False
        return None if None in oks else True

    def to_json(self) -> dict[str, Any]:
        lay = self.layout
        return {
            "path": self.path,
            "fits": self.fits,
            "layout": {
                "tp": lay.tp,
                "pp": lay.pp,
                "ep": lay.ep,
                "dp": lay.dp,
                "zero": lay.stage,
                "plugin": lay.plugin,
                "gpus": lay.world,
                "gpu_mem": lay.gpu_mem,
                "dtype": lay.dtype,
            },
            "architecture": self.arch.to_json(),
            "checks": [c.to_json() for c in self.checks],
            "memory": self.memory.to_json() if self.memory else None,
            "grid": list(self.grid),
        }

    def to_frame(self) -> pd.DataFrame:
        """One row per check (rule, ok, message); memory per GPU last, when a GPU memory
        was given."""
        import pandas as pd

        rows = [{"rule": c.rule, "ok": c.ok, "message": c.message} for c in self.checks]
        m = self.memory
        if m is not None and m.gpu_mem is not None:
            words = f"{human_bytes(m.total)} per GPU (stage {m.stage}) of {human_bytes(m.gpu_mem)}"
            rows.append({"rule": "memory_per_gpu", "ok": m.fits, "message": words})
        return pd.DataFrame(rows, columns=["rule", "ok", "message"])

    def format_text(self) -> str:
        lay, a = self.layout, self.arch
        verdict = {True: "FITS", False: "DOES NOT FIT", None: "UNKNOWN (cannot be decided)"}
        lines = [
            f"{self.path}: {verdict[self.fits]} at tp {lay.tp} x pp {lay.pp} x ep {lay.ep} "
            f"(dp {lay.dp}, {lay.world} GPUs), plugin {lay.plugin}, ZeRO {lay.stage}, {lay.dtype}",
            "architecture ("
            + (f"config: {a.config_path}" if a.config_path else "no config.json")
            + ")",
        ]
        for k, src in a.sources.items():
            lines.append(f"  {k:13} {getattr(a, k)!s:>10}  from {src}")
        lines.append("checks")
        mark = {True: "ok  ", False: "FAIL", None: "??  "}
        lines += [f"  {mark[c.ok]} {c.rule:20} {c.message}" for c in self.checks]
        m = self.memory
        if m is not None:
            lines.append(f"memory per GPU (stage {m.stage}, {m.params:,} parameters)")
            for k in ("weights", "gradients", "master_weights", "optimizer_moments"):
                lines.append(f"  {k:18} {human_bytes(getattr(m, k)):>10}")
            cap = f" of {human_bytes(m.gpu_mem)}" if m.gpu_mem is not None else ""
            lines.append(
                f"  {'total':18} {human_bytes(m.total):>10}{cap}; not counted: activations"
            )
        sym = {True: "✓", False: "✗", None: "?"}
        pps = sorted({int(str(c["pp"])) for c in self.grid})
        lines.append("grid (rows tp, columns pp)   " + " ".join(f"{p:>3}" for p in pps))
        for tp in sorted({int(str(c["tp"])) for c in self.grid}):
            row = [c for c in self.grid if c["tp"] == tp]
            cells = " ".join(f"{sym[c['fits']]:>3}" for c in row)  # type: ignore[index]
            lines.append(f"  tp {tp:<3}{'':23}{cells}")
        return "\n".join(lines)


def fit_checkpoint(path: str | Path | Location | CheckpointView, layout: Layout) -> FitReport:
    """Open ``path`` (headers only; or take the open view) and decide whether it loads and
    fits at ``layout``."""
    view = as_view(path)
    return fit_view(view.path if isinstance(path, CheckpointView) else path, view, layout)


def fit_view(path: str | Path | Location, view: CheckpointView, layout: Layout) -> FitReport:
    """:func:`fit_checkpoint` of a checkpoint already opened as ``view``."""
    arch = read_arch(path, view)
    tensors = model_tensors(view)
    memory = memory_per_gpu(tensors, arch, layout) if tensors and layout.dp else None
    return FitReport(
        path=str(path),
        layout=layout,
        arch=arch,
        checks=tuple(run_checks(arch, layout)),
        memory=memory,
        grid=tuple(fit_grid(arch, tensors, layout)),
    )
