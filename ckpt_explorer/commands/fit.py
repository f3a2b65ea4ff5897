"""``ckpt-explorer fit``: will a checkpoint load at a parallel layout, and fit per GPU."""

from __future__ import annotations

import argparse

from ..errors import CkptExplorerError
from ._shared import positive, print_json
from .exits import EXIT_DIFFERENT, EXIT_OK

# Every command module declares NAME, HELP and add_arguments alike: the command table reads them.
NAME = "fit"
HELP = (
    "will it load at this tp/pp/ep/ZeRO layout, and fit per GPU "
    "(exit 0 fits, 1 does not or unknown, 2 unreadable)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path")
    p.add_argument("--tp", type=positive, default=1, help="tensor-parallel size")
    p.add_argument("--pp", type=positive, default=1, help="pipeline-parallel size")
    p.add_argument("--ep", type=positive, default=1, help="expert-parallel size (MoE)")
    p.add_argument(
        "--zero",
        type=int,
        choices=[0, 1, 2, 3],
        help="ZeRO stage (default: the plugin's: hybrid/ddp 0, lowlevelzero 1, gemini/fsdp 3)",
    )
    p.add_argument(
        "--plugin", default="hybrid", choices=["hybrid", "gemini", "lowlevelzero", "ddp", "fsdp"]
    )
    p.add_argument("--gpus", type=positive, help="total GPUs (default tp x pp x ep)")
    p.add_argument("--gpu-mem", help="memory per GPU, e.g. 80GB or 80GiB")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--json", action="store_true", help="print fits, checks, memory, grid as JSON")


def run(args: argparse.Namespace) -> int:
    from ..fit import Layout, fit_checkpoint, parse_size

    try:
        mem = parse_size(args.gpu_mem) if args.gpu_mem else None
    except ValueError as e:
        raise CkptExplorerError(None, "--gpu-mem like 80GB or 80GiB", args.gpu_mem, str(e)) from e
    layout = Layout(args.tp, args.pp, args.ep, args.zero, args.plugin, args.gpus, mem, args.dtype)
    report = fit_checkpoint(args.path, layout)
    if args.json:
        print_json(report.to_json())
    else:
        print(report.format_text())
    return EXIT_OK if report.fits else EXIT_DIFFERENT
