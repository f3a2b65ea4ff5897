"""A diff as a real distributed job: ``torchrun --nproc-per-node N -m ckpt_explorer.diff.distributed
A B --out result.json``.

Every rank opens both checkpoints and plans the same pairs; the pairs are split by bytes
(largest first, each to the least-loaded rank); each rank compares its share; rank 0 gathers
the rows (``gather_object``), compares the values and merges the report, which the first
process of every node writes to its ``--out`` (over several nodes — torchrun ``--nnodes``
with a c10d rendezvous, the checkpoints on a shared filesystem — each node's launcher reads
its own copy).
Backend: gloo on CPU, nccl when ``--device`` resolves to CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..io.torchrun import rank_main
from .align import parse_rename
from .engine import DEFAULT_CHUNK_BYTES, Engine, PairPlan, plan_pairs
from .report import DiffResult


def split_by_bytes(plans: Sequence[PairPlan], n: int) -> list[list[PairPlan]]:
    """``n`` shares with balanced bytes (greedy, largest pair first); each in plan order."""
    shares: list[list[PairPlan]] = [[] for _ in range(n)]
    loads = [0] * n
    for p in sorted(plans, key=lambda p: (-p.nbytes, p.order)):
        k = min(range(n), key=lambda i: (loads[i], i))
        shares[k].append(p)
        loads[k] += p.nbytes
    return [sorted(s, key=lambda p: p.order) for s in shares]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ckpt_explorer.diff.distributed")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--out", required=True, help="JSON report written by rank 0")
    p.add_argument("--atol", type=float, default=0.0)
    p.add_argument("--rtol", type=float, default=0.0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--chunk-bytes", type=int, default=DEFAULT_CHUNK_BYTES)
    p.add_argument("--rename", action="append", default=[], metavar="OLD=NEW")
    return p


def run_rank(argv: Sequence[str] | None = None) -> int:
    """The body of each torchrun process."""
    import torch.distributed as dist

    from ..api import open_checkpoint
    from ..io.rank_progress import rank_progress
    from .api import options
    from .hf_side import hf_sides
    from .values import compare_values

    args = _parser().parse_args(argv)
    t0 = time.perf_counter()
    from ..remote.handoff import located

    view_a, view_b = hf_sides(open_checkpoint(located(args.a)), open_checkpoint(located(args.b)))
    rename = parse_rename(args.rename)
    engine = Engine(
        view_a,
        view_b,
        atol=args.atol,
        rtol=args.rtol,
        device=args.device,
        chunk_bytes=args.chunk_bytes,
        progress=rank_progress(),  # relayed to the launcher
    )
    backend = "nccl" if engine.device.type == "cuda" else "gloo"
    if engine.device.type == "cuda":
        import torch

        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        engine.device = torch.device("cuda", local)
    dist.init_process_group(backend)
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        plans = plan_pairs(view_a, view_b, rename)
        mine = split_by_bytes(plans, world)[rank]
        rows = [
            r.to_dict() | {"order": p.order} for r, p in zip(engine.run(mine), mine, strict=True)
        ]
        gathered: list[object] | None = [None] * world if rank == 0 else None
        dist.gather_object(rows, gathered, dst=0)
        if rank == 0:
            assert gathered is not None
            from .rows import TensorDiff

            merged = []
            for share in gathered:
                assert isinstance(share, list)
                for d in share:
                    row = TensorDiff.from_dict(d)
                    row.order = int(d["order"])
                    merged.append(row)
            merged.sort(key=lambda r: r.order)
            result = DiffResult(
                merged,
                compare_values(view_a, view_b, rename),
                False,
                options(
                    view_a.path,
                    view_b.path,
                    args.atol,
                    args.rtol,
                    str(engine.device),
                    world,
                    args.chunk_bytes,
                    t0,
                ),
            )
        # every node's first process writes the report where its own launcher reads it
        report = [json.dumps(result.to_json()) if rank == 0 else None]
        dist.broadcast_object_list(report, src=0)
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            tmp = Path(args.out).with_suffix(f".partial-{rank}")
            tmp.write_text(str(report[0]))
            tmp.replace(args.out)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return rank_main(run_rank, argv, "ckpt-explorer diff: error")


if __name__ == "__main__":
    sys.exit(main())
