"""The rank side of the ColossalAI engine job: build, boost, load, save (run under torchrun).

``python -m ckpt_explorer.convert.colossal_worker ARGS_JSON`` in every rank: the model is
built from ``config.json`` (transformers ``from_config``, weights not initialised) in the
source's dtype, boosted with the plugin the plan names, loaded with ``booster.load_model`` and
saved with ``booster.save_model``. Each rank writes ``<results>/rank<N>.json`` (``ok``, or the
``error`` it met; versions, seconds per phase); the parent verifies and installs the output.

On CPU (gloo) colossalai 0.5.0 needs two shims, applied before it starts: its CpuAccelerator's
RNG methods raise "not supported for cpu accelerator" when ShardFormer builds vocab-parallel
embeddings (they are pointed at torch's CPU RNG), and torch >= 2.6 lacks
``torch.distributed.is_hccl_available`` which its pipeline code calls (it returns False).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def cpu_shims() -> None:
    """Let colossalai 0.5.0's tensor and pipeline parallel code run on CPU with gloo."""
    import torch
    import torch.distributed as dist
    from colossalai.accelerator.cpu_accelerator import CpuAccelerator

    if not hasattr(dist, "is_hccl_available"):
        dist.is_hccl_available = lambda: False  # type: ignore[attr-defined]
    patches = {
        "get_rng_state": lambda self, device=None: torch.get_rng_state(),
        "get_rng_state_all": lambda self: [torch.get_rng_state()],
        "set_rng_state": lambda self, s, device=None: torch.set_rng_state(s),
        "set_rng_state_all": lambda self, s: torch.set_rng_state(s[0]),
        "manual_seed": lambda self, s: torch.manual_seed(s),
        "manual_seed_all": lambda self, s: torch.manual_seed(s),
    }
    for k, v in patches.items():
        setattr(CpuAccelerator, k, v)


def make_plugin(args: dict[str, Any]) -> Any:
    """The Booster plugin the plan names, at the source's precision."""
    from colossalai.booster import plugin as plugins

    name, precision = args["plugin"], _PRECISION.get(args["dtype"], "fp32")
    if name == "torch_ddp":
        return plugins.TorchDDPPlugin()
    if name == "gemini":  # fp16 / bf16 only; its fp32 master copies are what it saves
        return plugins.GeminiPlugin(precision="bf16" if precision == "bf16" else "fp16")
    if name == "lowlevelzero":
        return plugins.LowLevelZeroPlugin(precision=precision)
    extra: dict[str, int] = {"num_microbatches": args["pp"]} if args["pp"] > 1 else {}
    if args.get("vocab_multiple"):
        extra["make_vocab_size_divisible_by"] = args["vocab_multiple"]
    return plugins.HybridParallelPlugin(
        tp_size=args["tp"], pp_size=args["pp"], precision=precision, **extra
    )


def build_model(config_dir: str, dtype: str) -> Any:
    """The model of ``config_dir/config.json``, in ``dtype``, without initialising weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:  # transformers 4.x
        from transformers.modeling_utils import no_init_weights  # type: ignore[attr-defined]
    except ImportError:  # transformers 5.x
        from transformers.initialization import no_init_weights  # type: ignore[no-redef]
    config = AutoConfig.from_pretrained(config_dir)
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config)
    model.tie_weights()  # skipped with the weight initialisation; the config says what is tied
    return model.to(getattr(torch, dtype))


def run(args: dict[str, Any]) -> dict[str, Any]:
    """Boost, load, save; the facts rank 0 reports."""
    import torch.distributed as dist

    if args["backend"] == "gloo":
        cpu_shims()
    import colossalai
    import transformers
    from colossalai.booster import Booster

    colossalai.launch_from_torch(backend=args["backend"])
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    model = build_model(args["config"], args["dtype"])
    booster = Booster(plugin=make_plugin(args))
    model, *_ = booster.boost(model)
    t1 = time.perf_counter()
    seconds["build_boost"] = t1 - t0
    booster.load_model(model, args["source"], strict=False)
    t2 = time.perf_counter()
    seconds["load"] = t2 - t1
    booster.save_model(
        model, args["out"], shard=args["shard"], size_per_shard=args["size_per_shard"],
        use_safetensors=args["use_safetensors"],
    )  # fmt: skip
    dist.barrier()
    seconds["save"] = time.perf_counter() - t2
    return {
        "ok": True,
        "world": dist.get_world_size(),
        "colossalai": colossalai.__version__,
        "transformers": transformers.__version__,
        "plugin": type(booster.plugin).__name__,
        "seconds": seconds,
    }


def main(argv: list[str]) -> int:
    """Every rank writes ``<results>/rank<N>.json``: the facts, or the error it met."""
    args = json.loads(argv[1])
    rank = os.environ.get("RANK", "0")
    try:
        doc = run(args)
    except Exception as e:  # reported to the parent as one line, with the traceback's tail
        doc = {"ok": False, "error": f"{type(e).__name__}: {e}"[:800]}
        doc["traceback_tail"] = traceback.format_exc()[-1500:]
    (Path(args["results"]) / f"rank{rank}.json").write_text(json.dumps(doc))
    _end_process_groups()
    return 0 if doc["ok"] else 1


def _end_process_groups() -> None:
    """Destroy the process groups, so that no gloo thread is left joinable at exit (an abort)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
