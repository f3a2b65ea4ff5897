"""The ColossalAI engine job: gather a model checkpoint by loading it through a Booster.

The checkpoint is loaded into a model built from its ``config.json`` (transformers
``from_config``, no download) that a Booster wraps with the matching plugin, then saved with
``booster.save_model`` (unsharded, or sharded with ``size_per_shard`` MB) into the temp folder
beside the destination; config files are copied; every tensor of the source is compared bit for
bit with the output; then the output is moved into place.

Runs in a subprocess with the environment ``colossalai.launch_from_torch`` expects (a world of
1; gloo on CPU). Only TorchDDPPlugin runs on CPU: Gemini, LowLevelZero and HybridParallel with
TP>1 need CUDA devices and are not exercised by the tests on this machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import CkptExplorerError, MissingDependencyError
from ..io.ports import free_port
from .jobs import ConversionResult

PLUGINS = ("torch_ddp", "gemini", "low_level_zero", "hybrid_parallel")


def gather_with_colossalai(
    source: str | Path,
    destination: str | Path,
    plugin: str = "torch_ddp",
    shard: bool = True,
    size_per_shard_mb: int = 1024,
    use_safetensors: bool = False,
    overwrite: bool = False,
    config_dir: str | Path | None = None,
    timeout_s: float = 1800,
) -> ConversionResult:
    """Load ``source`` through a ColossalAI Booster and save it at ``destination``.

    ``use_safetensors`` is off by default, as in ColossalAI: its safetensors save refuses
    models with tied weights.

    Raises:
        MissingDependencyError: colossalai is not importable.
        CkptExplorerError: no config.json to build the model from, or the worker failed.
    """
    import importlib.util

    from .atomic import clean_stale, discard, install, make_temp
    from .planner import _check_paths

    if importlib.util.find_spec("colossalai") is None:
        raise MissingDependencyError(
            None, "colossalai installed", "no colossalai", "pip install colossalai"
        )
    if plugin not in PLUGINS:
        raise CkptExplorerError(None, f"a plugin among {', '.join(PLUGINS)}", repr(plugin))
    src, dst = Path(source), Path(destination)
    _check_paths(src, dst, overwrite)
    cfg = Path(config_dir) if config_dir else (src if src.is_dir() else src.parent)
    if not (cfg / "config.json").is_file():
        raise CkptExplorerError(
            cfg,
            "a config.json to build the model from",
            "none",
            "Pass config_dir= a folder holding the model's config.json.",
        )
    clean_stale(dst)
    tmp = make_temp(dst)
    out = tmp / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(
        RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
    )  # fmt: skip
    args = {
        "source": str(src), "out": str(out), "config": str(cfg), "plugin": plugin,
        "shard": shard, "size_per_shard": size_per_shard_mb,
        "use_safetensors": use_safetensors,
    }  # fmt: skip
    try:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "ckpt_explorer.convert.colossal_engine", json.dumps(args)],
            env=env, capture_output=True, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise CkptExplorerError(
                src, "the ColossalAI worker to finish", f"exit {proc.returncode}",
                "Its output ends with: " + (proc.stderr or proc.stdout)[-1500:],
            )  # fmt: skip
        for name in ("config.json", "generation_config.json"):
            if out.is_dir() and (cfg / name).is_file() and not (out / name).exists():
                shutil.copyfile(cfg / name, out / name)
        seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        mismatches = compare_by_name(src, out)
        verify_seconds = time.perf_counter() - t1
        files = sorted(p.name for p in out.iterdir()) if out.is_dir() else [dst.name]
        if not mismatches:
            from .atomic import fsync_tree

            fsync_tree(tmp)
            if shard:
                out.rename(tmp.parent / f"{tmp.name}-dir")
                shutil.rmtree(tmp)
                (tmp.parent / f"{tmp.name}-dir").rename(tmp)
                install(tmp, dst, True, overwrite)
            else:
                os.replace(out, tmp / dst.name)
                install(tmp, dst, False, overwrite)
        else:
            discard(tmp)
    except BaseException:
        discard(tmp)
        raise
    from ..api import open_checkpoint

    nbytes = open_checkpoint(src).tensor_bytes
    return ConversionResult(
        not mismatches, str(dst), files, nbytes, seconds, verify_seconds, mismatches, 1, 0
    )


def compare_by_name(source: Path, output: Path) -> list[str]:
    """Every source tensor must be in the output with equal bytes."""
    import torch

    from ..api import open_checkpoint
    from .writers import tensor_bytes

    a, b = open_checkpoint(source), open_checkpoint(output)
    problems = []
    for r in a.tensors:
        if r.name not in b:
            problems.append(f"{r.name}: missing from the output")
            continue
        x, y = a.load(r.name), b.load(r.name)
        if x.dtype != y.dtype or x.shape != y.shape:
            problems.append(f"{r.name}: {y.dtype} {list(y.shape)} vs {x.dtype} {list(x.shape)}")
        elif not torch.equal(tensor_bytes(x), tensor_bytes(y)):
            problems.append(f"{r.name}: bytes differ")
    return problems


def _worker(args: dict[str, Any]) -> None:
    import torch.distributed as dist

    if not hasattr(dist, "is_hccl_available"):  # colossalai 0.5.0 calls it; torch 2.13 lacks it
        dist.is_hccl_available = lambda: False  # type: ignore[attr-defined]
    import colossalai
    from colossalai.booster import Booster
    from transformers import AutoConfig, AutoModelForCausalLM

    colossalai.launch_from_torch(backend="gloo")
    config = AutoConfig.from_pretrained(args["config"])
    model = AutoModelForCausalLM.from_config(config)
    if args["plugin"] == "torch_ddp":
        from colossalai.booster.plugin import TorchDDPPlugin

        plugin: Any = TorchDDPPlugin()
    elif args["plugin"] == "gemini":  # needs CUDA
        from colossalai.booster.plugin import GeminiPlugin

        plugin = GeminiPlugin()
    elif args["plugin"] == "low_level_zero":  # needs CUDA
        from colossalai.booster.plugin import LowLevelZeroPlugin

        plugin = LowLevelZeroPlugin()
    else:  # needs CUDA for tp > 1
        from colossalai.booster.plugin import HybridParallelPlugin

        plugin = HybridParallelPlugin(tp_size=1, pp_size=1)
    booster = Booster(plugin=plugin)
    model, *_ = booster.boost(model)
    booster.load_model(model, args["source"], strict=False)
    booster.save_model(
        model, args["out"], shard=args["shard"], size_per_shard=args["size_per_shard"],
        use_safetensors=args["use_safetensors"],
    )  # fmt: skip
    dist.barrier()


if __name__ == "__main__":
    _worker(json.loads(sys.argv[1]))
