"""Run a module as a real distributed job: ``python -m torch.distributed.run`` on 127.0.0.1.

The diff and conversion jobs start their ranks the same way: a free loopback port for the
rendezvous (over several nodes: torchrun's c10d rendezvous at the first node, see
:class:`Nodes`), the caller's environment without a parent job's rank variables, OpenMP
threads shared among the ranks, the log kept in a file, cancellation, a time limit and the
ranks' progress (:mod:`.rank_progress`) polled while the job runs. Each rank writes its
result where the caller's arguments say.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..contracts import Cancel, ProgressFn, is_cancelled
from ..errors import CkptExplorerError
from .rank_progress import PROGRESS_DIR_ENV, RankRelay

# a parent job's variables, never passed on (the relay sets its own progress folder)
RANK_VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", PROGRESS_DIR_ENV,
)  # fmt: skip


@dataclass(frozen=True)
class Nodes:
    """This machine's place in a job over several nodes (a shared filesystem between them).

    Every node runs the same command with its own ``node_rank``; the nodes meet at
    ``endpoint`` (``host:port`` of the first node, c10d rendezvous) under ``job_id``.
    """

    nnodes: int
    node_rank: int
    endpoint: str
    job_id: str = "ckpt-explorer"

    def torchrun_args(self) -> list[str]:
        return [
            "--nnodes", str(self.nnodes), "--node-rank", str(self.node_rank),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", self.endpoint,
            "--rdzv-id", self.job_id,
        ]  # fmt: skip


def nodes_from_args(
    nnodes: int, node_rank: int, endpoint: str | None, job_id: str | None
) -> Nodes | None:
    """The :class:`Nodes` of ``--nnodes/--node-rank/--rdzv-endpoint/--rdzv-id``, None for one
    node. Raises ValueError when the endpoint is missing or the rank is out of range."""
    if nnodes <= 1:
        return None
    if not endpoint:
        raise ValueError(f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT (the first node)")
    if not 0 <= node_rank < nnodes:
        raise ValueError(f"--node-rank {node_rank} is not in 0..{nnodes - 1}")
    return Nodes(nnodes, node_rank, endpoint, job_id or "ckpt-explorer")


@dataclass(frozen=True)
class JobExit:
    """How the job ended: ``returncode`` (None when cancelled) and the end of its log."""

    returncode: int | None
    log_tail: str

    @property
    def cancelled(self) -> bool:
        return self.returncode is None


def run_torchrun(
    module: str,
    args: Sequence[str],
    nproc: int,
    log_dir: Path,
    *,
    cancel: Cancel | None = None,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    nodes: Nodes | None = None,
    progress: ProgressFn | None = None,
    on_poll: Callable[[], None] | None = None,
) -> JobExit:
    """Run ``python -m <module> <args>`` in ``nproc`` ranks and wait for it.

    Args:
        module: the rank-side module (it reads ``RANK``/``WORLD_SIZE`` from torchrun).
        args: its command-line arguments.
        nproc: processes on this machine.
        log_dir: a folder for the job's log (stdout and stderr of every rank).
        cancel: when set, the job is terminated.
        timeout_s: terminate the job after this long (it then ends with a non-zero code).
        env: variables set for the job on top of the caller's environment.
        nodes: this node's part of a job over several nodes (None: this machine alone, the
            rendezvous on a free loopback port).
        progress: receives this node's ranks' progress, combined (the ranks send theirs
            with :func:`~.rank_progress.rank_progress`).
        on_poll: called every time the job is polled (e.g. to measure its output).
    """
    import subprocess  # here, not at import: a one-process job never starts a child

    from .ports import free_port

    meet = (
        nodes.torchrun_args()
        if nodes is not None
        else ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    )
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc-per-node", str(nproc), *meet,
        "-m", module, *args,
    ]  # fmt: skip
    job_env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
    job_env.update(env or {})
    relay = None
    if progress is not None:
        relay = RankRelay(log_dir / "progress", nproc, progress)
        job_env.update(relay.environment())
    job_env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    log = log_dir / "torchrun.log"
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with open(log, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=job_env)
        while proc.poll() is None:
            if relay is not None:
                relay.poll()
            if on_poll is not None:
                on_poll()
            late = deadline is not None and time.monotonic() > deadline
            if is_cancelled(cancel) or late:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                if not late:
                    return JobExit(None, "")
                break
            time.sleep(0.05)
    if relay is not None:
        relay.poll()  # the ranks' last events
    tail = log.read_text(errors="replace")[-2000:]
    return JobExit(proc.returncode, tail)


def rank_main(
    run_rank: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None, prefix: str
) -> int:
    """A rank's entry point: ``run_rank(argv)``; a package error is printed after ``prefix``
    on stderr and exits 2."""
    try:
        return run_rank(argv)
    except CkptExplorerError as e:
        print(f"{prefix}: {e.one_line()}", file=sys.stderr)
        return 2
