"""Plan a ColossalAI engine job: plugin, layout, processes, precision; refused before launch.

Everything that can be decided without starting a process is checked here: colossalai is
importable, a ``config.json`` to build the model from, the plugin's device needs (Gemini and
LowLevelZero run on CUDA only), the package's own ``fit`` checks for the tp / pp asked, and the
transformers version colossalai pins for HybridParallel (ShardFormer's policies).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CkptExplorerError, MissingDependencyError
from ..io.location import Location, as_location

if TYPE_CHECKING:
    import pandas as pd

PLUGINS = ("torch_ddp", "hybrid", "gemini", "lowlevelzero")
ALIASES = {"low_level_zero": "lowlevelzero", "hybrid_parallel": "hybrid", "ddp": "torch_ddp"}
CUDA_ONLY = ("gemini", "lowlevelzero")
# name tables (a plugin's name in fit's words): alike in shape with other tables only
FIT_PLUGIN = {
    "torch_ddp": "ddp",
    "hybrid": "hybrid",
    "gemini": "gemini",
    "lowlevelzero": "lowlevelzero",
}
FIT_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
PATH_VARIABLE = "CKPT_EXPLORER_COLOSSALAI_PATH"  # folders put first on the ranks' PYTHONPATH


@dataclass(frozen=True)
class EnginePlan:
    """What the job will do: load ``source`` through a Booster, save to ``destination``.

    Attributes:
        nproc: ranks (tp x pp x dp); backend: gloo on CPU, nccl on CUDA.
        dtype: the source's floating dtype; the model is built and the plugin run in it.
        checks: the ``fit`` checks run for this layout (rule, ok, message).
        python_path: folders put first on the ranks' PYTHONPATH (from ``$PATH_VARIABLE``).
        vocab_multiple: HybridParallelPlugin's ``make_vocab_size_divisible_by`` when not its
            default (1 at pp > 1: colossalai 0.5.0's save fails on vocab-padded weights there,
            "'Tensor' object has no attribute '_unpad_detach'"; the saved tensors are unpadded
            either way).
    """

    source: Path
    destination: Path
    config_dir: Path
    plugin: str
    tp: int
    pp: int
    nproc: int
    backend: str
    dtype: str
    shard: bool
    size_per_shard_mb: int
    use_safetensors: bool
    overwrite: bool
    tensors: int
    total_bytes: int
    checks: tuple[dict[str, object], ...] = ()
    python_path: tuple[str, ...] = field(default_factory=tuple)
    vocab_multiple: int | None = None

    def to_json(self) -> dict[str, Any]:
        doc = dict(self.__dict__)
        doc.update(engine="colossalai", source=str(self.source), config_dir=str(self.config_dir))
        doc.update(destination=str(self.destination), checks=list(self.checks))
        doc["python_path"] = list(self.python_path)
        return doc

    def to_frame(self) -> pd.DataFrame:
        """One row per ``fit`` check run for this layout: rule, ok, message."""
        import pandas as pd

        rows = [{k: c.get(k) for k in ("rule", "ok", "message")} for c in self.checks]
        return pd.DataFrame(rows, columns=["rule", "ok", "message"])

    def describe(self) -> str:
        out = "sharded folder of" if self.shard else "one file of"
        kind = "safetensors" if self.use_safetensors else "torch .bin"
        lines = [
            f"{self.source} -> {self.destination} (engine colossalai)",
            f"  plugin {self.plugin}, tp {self.tp} x pp {self.pp}, {self.nproc} process(es) on "
            f"{self.backend}, model from {self.config_dir / 'config.json'} in {self.dtype}",
            f"  {self.tensors} tensors, {self.total_bytes} bytes; output: {out} {kind}"
            + (f" ({self.size_per_shard_mb} MB shards)" if self.shard else ""),
            "  every tensor is compared bit for bit with the source before the output is installed",
        ]
        if self.vocab_multiple is not None:
            lines.append(
                f"  make_vocab_size_divisible_by={self.vocab_multiple} (colossalai 0.5.0 fails to "
                "save vocab-padded weights at pp > 1)"
            )
        mark = {True: "ok  ", False: "FAIL", None: "??  "}
        lines += [f"  fit {mark[c['ok']]} {c['rule']}: {c['message']}" for c in self.checks]  # type: ignore[index]
        return "\n".join(lines)


def normalize_plugin(name: str) -> str:
    name = ALIASES.get(name, name)
    if name not in PLUGINS:
        raise CkptExplorerError(None, f"a plugin among {', '.join(PLUGINS)}", repr(name))
    return name


def dominant_dtype(records: Any) -> str:
    """The floating dtype holding the most bytes (float32 when there is none)."""
    by: dict[str, int] = {}
    for r in records:
        if r.dtype in FIT_DTYPE:
            by[r.dtype] = by.get(r.dtype, 0) + r.nbytes
    return max(by, key=lambda k: by[k]) if by else "float32"


def extra_path() -> tuple[str, ...]:
    raw = os.environ.get(PATH_VARIABLE, "")
    return tuple(p for p in raw.split(os.pathsep) if p)


def _transformers_seen(paths: tuple[str, ...]) -> str | None:
    """The transformers version the ranks will import (the extra folders come first)."""
    import importlib.metadata as md

    for p in paths:
        for d in md.distributions(path=[p]):
            if (d.metadata["Name"] or "").lower() == "transformers":
                return d.version
    try:
        return md.version("transformers")
    except md.PackageNotFoundError:
        return None


def check_transformers_pin(paths: tuple[str, ...]) -> None:
    """HybridParallel's ShardFormer policies need the transformers colossalai pins."""
    import importlib.metadata as md

    try:
        from packaging.requirements import Requirement
    except ImportError:  # pragma: no cover - packaging comes with transformers
        return
    try:
        reqs = [Requirement(r) for r in md.requires("colossalai") or []]
        cai = md.version("colossalai")
    except md.PackageNotFoundError:
        return
    pin = next((r for r in reqs if r.name == "transformers" and not r.marker), None)
    seen = _transformers_seen(paths)
    if pin is None or (seen is not None and pin.specifier.contains(seen, prereleases=True)):
        return
    raise MissingDependencyError(
        None,
        f"transformers{pin.specifier} for colossalai {cai}'s HybridParallelPlugin "
        "(its package pins it)",
        f"transformers {seen or 'not installed'}",
        f"Install it, or set {PATH_VARIABLE} to a folder holding it (pip install --target).",
    )


def check_device(plugin: str, nproc: int, device: str = "auto") -> str:
    """The backend: nccl on CUDA (``auto`` where there is one), gloo on CPU.

    Gemini and LowLevelZero need CUDA; ``cpu`` hides the GPUs from the ranks.
    """
    import torch

    if device not in ("auto", "cpu", "cuda"):
        raise CkptExplorerError(None, "a device among auto, cpu, cuda", repr(device))
    cuda = torch.cuda.is_available()
    if plugin in CUDA_ONLY and (device == "cpu" or not cuda):
        raise CkptExplorerError(
            None,
            f"CUDA GPUs for --plugin {plugin} (ColossalAI runs Gemini and LowLevelZero on "
            "CUDA only)",
            "no CUDA device (torch.cuda.is_available() is False)" if not cuda else "--device cpu",
            "Run it on a machine with NVIDIA GPUs, or use --plugin torch_ddp or hybrid on CPU.",
        )
    if device == "cpu" or (device == "auto" and not cuda):
        return "gloo"
    if not cuda:
        raise CkptExplorerError(
            None, "a CUDA device for --device cuda", "torch.cuda.is_available() is False"
        )
    if nproc > torch.cuda.device_count():
        raise CkptExplorerError(
            None,
            f"{nproc} CUDA devices for {nproc} processes",
            f"{torch.cuda.device_count()}",
            "Lower --tp / --pp, or use --device cpu.",
        )
    return "nccl"


def fit_checks(source: Path, plugin: str, tp: int, pp: int, nproc: int, dtype: str) -> list[Any]:
    """``fit`` at this layout; refused (one line naming the failing checks) when it does not fit."""
    from ..fit import Layout, fit_checkpoint

    lay = Layout(tp=tp, pp=pp, plugin=FIT_PLUGIN[plugin], gpus=nproc, dtype=FIT_DTYPE[dtype])
    report = fit_checkpoint(source, lay)
    failed = [c for c in report.checks if c.ok is False]
    if failed:
        raise CkptExplorerError(
            source,
            f"a model that loads at tp {tp} x pp {pp} under --plugin {plugin}",
            "; ".join(f"{c.rule}: {c.message}" for c in failed),
            f"Pick sizes that fit (ckpt-explorer fit {source} shows the grid); nothing was started.",
        )
    return list(report.checks)


def plan_engine_job(
    source: str | Path | Location,
    destination: str | Path,
    plugin: str = "torch_ddp",
    tp: int = 1,
    pp: int = 1,
    nproc: int | None = None,
    target: str = "bin",
    shard: bool = True,
    size_per_shard_mb: int = 1024,
    overwrite: bool = False,
    config_dir: str | Path | None = None,
    device: str = "auto",
) -> EnginePlan:
    """Check everything that can be checked before launch; the plan, or a one-line refusal.

    Args:
        plugin: torch_ddp, hybrid, gemini or lowlevelzero.
        tp, pp: tensor / pipeline sizes (hybrid only). nproc: ranks (default tp x pp); a
            multiple of tp x pp.
        target: hf / safetensors write safetensors, bin / torch write torch ``.bin`` files.
        shard: a folder of ``size_per_shard_mb`` shards with an index, else one file.
        device: ``auto`` (CUDA and nccl where there is a GPU, else CPU and gloo), cpu, cuda.

    Raises:
        MissingDependencyError: colossalai, or the transformers it pins for hybrid, is missing.
        CkptExplorerError: no config.json, a device the plugin needs is absent, or the model
            does not fit the layout (the fit checks' messages).
    """
    from ..api import open_checkpoint
    from .planner import _check_paths
    from .targets import TARGETS

    plugin = normalize_plugin(plugin)
    saves = {name: spec.colossalai for name, spec in TARGETS.items() if spec.colossalai}
    if target not in saves:
        raise CkptExplorerError(
            None, f"--to among {', '.join(saves)} with --engine colossalai", repr(target)
        )
    if plugin != "hybrid" and tp * pp > 1:
        raise CkptExplorerError(
            None, "--tp / --pp only with --plugin hybrid", f"--plugin {plugin}",
            "The engine runs TorchDDP, Gemini and LowLevelZero data-parallel only.",
        )  # fmt: skip
    if importlib.util.find_spec("colossalai") is None:
        raise MissingDependencyError(
            None, "colossalai installed", "no colossalai", "pip install colossalai"
        )
    local = as_location(source).local_path()
    if local is None:
        raise CkptExplorerError(
            source, "a local source for --engine colossalai", "a remote URL",
            "Convert it with the stream engine, or download it first.",
        )  # fmt: skip
    src, dst = local, Path(destination)
    _check_paths(as_location(src), dst, overwrite)
    cfg = Path(config_dir) if config_dir else (src if src.is_dir() else src.parent)
    if not (cfg / "config.json").is_file():
        raise CkptExplorerError(
            cfg,
            "a config.json to build the model from",
            "none",
            "Pass config_dir= a folder holding the model's config.json.",
        )
    world = nproc or tp * pp
    if world % (tp * pp):
        raise CkptExplorerError(None, f"processes a multiple of tp {tp} x pp {pp}", str(world))
    records = open_checkpoint(src).tensors
    dtype = dominant_dtype(records)
    backend = check_device(plugin, world, device)
    checks = fit_checks(src, plugin, tp, pp, world, dtype)
    paths = extra_path()
    if plugin == "hybrid":
        check_transformers_pin(paths)
    return EnginePlan(
        source=src,
        destination=dst,
        config_dir=cfg,
        plugin=plugin,
        tp=tp,
        pp=pp,
        nproc=world,
        backend=backend,
        dtype=dtype,
        shard=shard,
        size_per_shard_mb=size_per_shard_mb,
        use_safetensors=saves[target] == "safetensors",
        overwrite=overwrite,
        tensors=len(records),
        total_bytes=sum(r.nbytes for r in records),
        checks=tuple(c.to_json() for c in checks),
        python_path=paths,
        vocab_multiple=1 if plugin == "hybrid" and pp > 1 else None,
    )
