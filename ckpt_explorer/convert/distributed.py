"""A conversion as a real distributed job:
``torchrun --nproc-per-node N -m ckpt_explorer.convert.distributed SRC DST --to hf ...``.

Every rank makes the same plan from the same arguments; the output files are shared out by
bytes (largest first, each to the least-loaded rank) and each rank writes and verifies its
share in the temp folder that rank 0 made beside the destination (its name is broadcast), so
the same launch works across nodes with a shared filesystem (torchrun ``--nnodes``). After a
barrier rank 0 writes the index and side files, checks the index, gathers the ranks'
mismatches, and moves the output into place only when all is verified; the first process
of every node writes the result for its node's launcher. Each rank's bytes written are
relayed to its node's launcher as progress (:mod:`ckpt_explorer.io.rank_progress`).
Backend: nccl when CUDA is available (``--backend`` overrides), gloo otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..errors import CkptExplorerError
from ..io.torchrun import rank_main
from .plan_types import ConversionPlan, PlannedFile
from .runner import ConversionResult, output_root, write_extras, write_files
from .targets import target


def share_files(files: Sequence[PlannedFile], n: int) -> list[list[PlannedFile]]:
    """``n`` shares balanced by bytes (greedy, largest first), each in plan order."""
    order = {id(f): i for i, f in enumerate(files)}
    shares: list[list[PlannedFile]] = [[] for _ in range(n)]
    loads = [0] * n
    for f in sorted(files, key=lambda f: (-f.nbytes, order[id(f)])):
        k = min(range(n), key=lambda i: (loads[i], i))
        shares[k].append(f)
        loads[k] += max(f.nbytes, 1)
    return [sorted(s, key=lambda f: order[id(f)]) for s in shares]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ckpt_explorer.convert.distributed")
    p.add_argument("source")
    p.add_argument("destination")
    p.add_argument("--to", required=True)
    p.add_argument("--max-shard-size")
    p.add_argument("--dtype")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--model-only", action="store_true")
    p.add_argument("--backend", choices=("gloo", "nccl"))
    p.add_argument("--result", help="JSON file for the ConversionResult (written by rank 0)")
    return p


def run_rank(argv: Sequence[str] | None = None) -> int:
    """The body of each torchrun process; returns 0 verified, 1 not verified."""
    import torch
    import torch.distributed as dist

    from ..contracts import Meter
    from ..io.rank_progress import rank_progress
    from ..remote.handoff import located
    from .atomic import clean_stale, discard, fsync_tree, install, make_temp
    from .planner import plan_conversion
    from .verify import check_index, check_written, verify_output

    args = _parser().parse_args(argv)
    source = located(args.source)  # a remote source: its store, opened once per rank
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        # rank 0 checks the destination and makes the temp folder; the others plan after it
        plan: ConversionPlan | None = None
        box: list[object] = [None]
        error: CkptExplorerError | None = None

        def plan_it(overwrite: bool) -> ConversionPlan:
            return plan_conversion(
                source, args.destination, args.to, args.max_shard_size, args.dtype, overwrite,
                model_only=args.model_only,
            )  # fmt: skip

        if rank == 0:
            try:
                plan = plan_it(args.overwrite)
                clean_stale(plan.destination)
                box[0] = str(make_temp(plan.destination))
            except CkptExplorerError as e:
                error, box[0] = e, ("error", e.one_line())
        dist.broadcast_object_list(box, src=0)
        if error is not None:
            raise error
        if isinstance(box[0], tuple):
            raise CkptExplorerError(args.destination, "rank 0 to start the job", str(box[0][1]))
        tmp = Path(str(box[0]))
        if plan is None:
            plan = plan_it(True)  # rank 0 made the check; the temp folder now exists
            plan.options["overwrite"] = args.overwrite
        root, opened = output_root(plan, tmp)
        t0 = time.perf_counter()
        spec = target(plan.target)
        if not spec.torchrun:
            raise CkptExplorerError(
                args.destination, "a target the torchrun job writes", f"--to {plan.target}"
            )
        mine = share_files(plan.files, world)[rank]
        if spec.torchrun == "rank0":  # one writer makes the whole output
            mine = plan.files if rank == 0 else []
        meter = Meter(rank_progress(), "write", sum(f.nbytes for f in mine))
        meter.emit(force=True)  # this rank's share, relayed to the launcher
        write_files(plan, root, mine, meter)
        if rank == 0:
            write_extras(plan, root)
        dist.barrier()
        seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        problems = (spec.verify or verify_output)(plan, opened, mine)
        gathered: list[object] | None = [None] * world if rank == 0 else None
        dist.gather_object(problems, gathered, dst=0)
        verified = False
        result: str | None = None
        if rank == 0:
            assert gathered is not None
            mismatches = [str(m) for share in gathered if isinstance(share, list) for m in share]
            if plan.index is not None:
                mismatches += check_index(plan, tmp)
            mismatches += check_written(plan, tmp)
            verify_seconds = time.perf_counter() - t1
            verified = not mismatches
            if verified:
                fsync_tree(tmp)
                install(tmp, plan.destination, plan.output_is_dir, args.overwrite)
            else:
                discard(tmp)
            if args.result:
                summary = ConversionResult(
                    verified,
                    str(plan.destination),
                    plan.output_files(),
                    plan.total_bytes,
                    seconds,
                    verify_seconds,
                    mismatches,
                    world,
                    plan.fast_bytes,
                )
                result = json.dumps(summary.to_json())
        # every node's first process writes the result where its own launcher reads it
        flag = [verified, result if rank == 0 else None]
        dist.broadcast_object_list(flag, src=0)
        if args.result and int(os.environ.get("LOCAL_RANK", "0")) == 0 and flag[1] is not None:
            Path(args.result).write_text(str(flag[1]))
        dist.barrier()
        return 0 if flag[0] else 1
    finally:
        dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    return rank_main(run_rank, argv, "ckpt-explorer convert")


if __name__ == "__main__":
    sys.exit(main())
