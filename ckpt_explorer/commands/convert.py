"""``ckpt-explorer convert``: a planned, atomic, verified conversion."""

from __future__ import annotations

import argparse
import json

from ..convert.targets import target_names
from ..errors import CkptExplorerError
from ._shared import add_node_options, nodes, positive, print_json, run_and_report
from .exits import EXIT_OK

NAME = "convert"
HELP = "convert a checkpoint: planned, atomic, verified (exit 0 verified, 1 not, 2 bad input)"


# add_argument lines alike in shape with every command module's: declarations, not logic.
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source")
    p.add_argument("destination")
    p.add_argument("--to", required=True, choices=target_names())
    p.add_argument("--max-shard-size", help="e.g. 5GB, 500MB: shard into a folder with an index")
    p.add_argument(
        "--dtype",
        help="cast floating-point tensors (bf16, fp16, fp32; off by default); for --to gguf the "
        "tensor type: f32, f16 (default), bf16, q8_0",
    )
    p.add_argument("--nproc", type=int, default=1, help="processes (torchrun job when > 1)")
    add_node_options(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    p.add_argument("--overwrite", action="store_true", help="replace an existing destination")
    p.add_argument(
        "--model-only",
        action="store_true",
        help="of a training state, write the model alone (what is left out is listed)",
    )
    p.add_argument("--json", action="store_true", help="print the plan and result as JSON")
    p.add_argument("--limit", type=int, default=20, help="plan files / mismatches to print")
    p.add_argument(
        "--engine",
        choices=["stream", "colossalai"],
        default="stream",
        help="colossalai: load through a real ColossalAI Booster and save, then verify",
    )
    p.add_argument(
        "--plugin",
        choices=["torch_ddp", "hybrid", "gemini", "lowlevelzero"],
        help="Booster plugin for --engine colossalai (default torch_ddp; gemini and "
        "lowlevelzero need CUDA)",
    )
    p.add_argument("--tp", type=positive, default=1, help="tensor-parallel size (hybrid)")
    p.add_argument("--pp", type=positive, default=1, help="pipeline-parallel size (hybrid)")
    p.add_argument(
        "--device",
        dest="engine_device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="--engine colossalai: cuda/nccl or cpu/gloo (auto: cuda where there is a GPU)",
    )


def run(args: argparse.Namespace) -> int:
    from ..convert import plan_conversion, run_conversion

    if args.engine == "colossalai":
        return _convert_with_colossalai(args)
    if args.plugin or args.tp > 1 or args.pp > 1 or args.engine_device != "auto":
        raise CkptExplorerError(
            None, "--engine colossalai with --plugin / --tp / --pp / --device", "--engine stream",
            "Add --engine colossalai, or drop them.",
        )  # fmt: skip
    from ..io.gc_pause import freeze_at_exit, gc_paused

    freeze_at_exit()
    with gc_paused():  # a plan's objects hold no cycles (io/gc_pause.py)
        plan = plan_conversion(
            args.source,
            args.destination,
            args.to,
            max_shard_size=args.max_shard_size,
            dtype=args.dtype,
            overwrite=args.overwrite,
            model_only=args.model_only,
        )
    if args.dry_run:
        if args.json:
            print_json({"plan": plan.to_json()})
        else:
            print(plan.describe(limit=args.limit))
        return EXIT_OK
    return run_and_report(
        args,
        plan,
        lambda bar: run_conversion(plan, progress=bar, nproc=args.nproc, nodes=nodes(args)),
        "wrote",
    )


def _convert_with_colossalai(args: argparse.Namespace) -> int:
    """``convert --engine colossalai``: load and save through a real Booster, then verify."""
    from ..convert import parse_size
    from ..convert.colossal_engine import run_engine_job
    from ..convert.colossal_plan import plan_engine_job

    if args.dtype or args.model_only:
        raise CkptExplorerError(
            None, "no --dtype / --model-only with --engine colossalai", "one of them",
            "The engine writes the model's tensors as they are; drop the option.",
        )  # fmt: skip
    size = parse_size(args.max_shard_size)
    plan = plan_engine_job(
        args.source, args.destination, args.plugin or "torch_ddp", args.tp, args.pp,
        nproc=args.nproc if args.nproc > 1 else None, target=args.to, shard=size is not None,
        size_per_shard_mb=max(1, (size or 2**30) // 2**20), overwrite=args.overwrite,
        device=args.engine_device,
    )  # fmt: skip
    if args.dry_run:
        print(json.dumps({"plan": plan.to_json()}, indent=2) if args.json else plan.describe())
        return EXIT_OK
    how = f"{plan.plugin} tp {plan.tp} x pp {plan.pp} on {plan.nproc} process(es)"
    return run_and_report(args, plan, lambda bar: run_engine_job(plan, progress=bar), how)
